// Package hotspot reads a HotSpot JVM's Java-level state from the outside,
// with no flag set when the JVM started: its Java threads (name, status,
// where the VM says each runs), their Java frames with the monitors they
// hold and the lock each waits for, the Java-level deadlocks, the
// safepoint the VM is in and the threads it waits for, and the names of
// the methods in its code cache.
//
// Two paths give the same model (Java):
//
//   - ParseThreadDump reads the VM's own thread dump (jcmd Thread.print -l,
//     asked through the attach mechanism by package
//     runtimes/hotspot/attach). It is what jstack prints, and needs the VM
//     to answer: a VM stuck at a safepoint does not.
//   - VM reads the process's memory through the layout libjvm.so
//     publishes for the Serviceability Agent (gHotSpotVMStructs,
//     gHotSpotVMTypes, gHotSpotVMIntConstants, gHotSpotVMLongConstants and
//     the entry layout of each): the thread list (ThreadsSMRSupport), each
//     JavaThread's java.lang.Thread object (its fields found by name in
//     the class's FieldInfo, as the SA does), the frame anchor and the
//     interpreted and compiled frames from it (the nmethods' PcDescs and
//     scopes for inlined methods, the line number tables), the monitors
//     (ObjectMonitor owners, stack locks resolved to their thread) and
//     java.util.concurrent owners (parkBlocker's exclusiveOwnerThread),
//     and the code cache (CodeCache::_heaps, block by block). The
//     safepoint state is not in VMStructs since JDK 17; it comes from
//     libjvm's .symtab where the build keeps it (Debian's does), else the
//     threads' states say which would hold a safepoint up. The memory is
//     read whether or not the VM runs: this is the path for the stall.
//
// Everything here is a pure reader over two small interfaces: Memory (a
// bounded read of the target's address space) and Symbols (libjvm's
// exported symbols). Nothing touches a process, so every reader is fuzzed
// against garbage, cycles and truncated structures. What is read from the
// target is untrusted: a Reader bounds the bytes read and the pages kept
// (Limits); every list, chain and string has a bound of its own; a
// failed read names the structure and the address (*MemoryError); a
// layout that lacks a field names all it lacks (*MissingError). The
// frame walker knows x86-64's interpreter frame; other architectures get
// names and states without frames.
//
// Tested on OpenJDK 17 (Debian's 17.0.15; compressed oops and class
// pointers on and off). Where other releases' layouts differ in what is
// read, the reader follows what VMStructs says where it can (a
// JavaThread's Thread object held directly before JDK 16, through an
// OopHandle since; a Thread's status in its FieldHolder since JDK 19),
// and a layout that lacks a field it needs (JDK 21 replaced FieldInfo
// with a compressed stream) is refused with a *MissingError naming all
// that is missing; the capture then asks the JVM for its own thread dump
// instead (package capture).
package hotspot
