package hotspot

import (
	"fmt"
)

// VM reads one HotSpot JVM's state from its memory, through the layout
// its libjvm.so publishes. It is made per reading (a snapshot): what it
// caches (pages, class fields) is what the target held then.
type VM struct {
	r    *Reader
	syms Symbols
	l    *Layout
	o    offsets

	narrowOops, narrowKlass bool
	oopBase, klassBase      uint64
	oopShift, klassShift    uint
	arrayLength             uint64 // offset of an array's length

	fields  map[uint64]map[string]uint64 // klass → field name → offset
	methods map[uint64]*Method           // Method* → what it names
	code    *codeIndex                   // the code cache, looked up by pc
}

// offsets are the VMStructs entries every reader here needs; NewVM fails
// naming all that are missing.
type offsets struct {
	threadsList, listLength, listThreads         uint64
	threadObj, threadState, osThread, osThreadID uint64
	stackBase, stackSize                         uint64
	pendingMonitor, waitingMonitor               uint64
	anchorSP, anchorPC, anchorFP                 uint64
	oopHandleObj                                 uint64
	klassField                                   uint64

	klassName, klassSuper, klassLayout      uint64
	ikFields, ikFieldsCount, ikConstants    uint64
	arrayU2Length, arrayU2Data              uint64
	cpHolder, cpSize, cpLength              uint64
	symLength, symBody                      uint64
	fieldSlots, fieldAccess, fieldName      int64
	fieldLow, fieldHigh, tagSize, tagOffset int64
	monOwner, monObject                     uint64
	stateInJava, stateInVM, stateBlocked    int64
	stateInNative                           int64
	flags, numFlags, flagAddr, flagName     uint64
	flagSize                                uint64
	narrowOopBase, narrowOopShift           uint64
	narrowKlassBase, narrowKlassShift       uint64
	statusValues                            map[int64]string
}

// NewVM reads the VM's compressed-pointer settings and checks that the
// layout has every field the readers use.
func NewVM(r *Reader, syms Symbols, l *Layout) (*VM, error) {
	vm := &VM{r: r, syms: syms, l: l, fields: map[uint64]map[string]uint64{}}
	n := &need{l: l}
	o := &vm.o
	o.threadsList = n.static("ThreadsSMRSupport", "_java_thread_list")
	o.listLength = n.offset("ThreadsList", "_length")
	o.listThreads = n.offset("ThreadsList", "_threads")
	o.threadObj = n.offset("JavaThread", "_threadObj")
	o.threadState = n.offset("JavaThread", "_thread_state")
	o.osThread = n.offset("JavaThread", "_osthread")
	o.osThreadID = n.offset("OSThread", "_thread_id")
	o.stackBase = n.offset("JavaThread", "_stack_base")
	o.stackSize = n.offset("JavaThread", "_stack_size")
	o.pendingMonitor = n.offset("JavaThread", "_current_pending_monitor")
	o.waitingMonitor = n.offset("JavaThread", "_current_waiting_monitor")
	anchor := n.offset("JavaThread", "_anchor")
	o.anchorSP = anchor + n.offset("JavaFrameAnchor", "_last_Java_sp")
	o.anchorPC = anchor + n.offset("JavaFrameAnchor", "_last_Java_pc")
	o.anchorFP = anchor + n.offset("JavaFrameAnchor", "_last_Java_fp")
	o.oopHandleObj = n.offset("OopHandle", "_obj")
	o.klassField = n.offset("oopDesc", "_metadata._compressed_klass")
	o.klassName = n.offset("Klass", "_name")
	o.klassSuper = n.offset("Klass", "_super")
	o.klassLayout = n.offset("Klass", "_layout_helper")
	o.ikFields = n.offset("InstanceKlass", "_fields")
	o.ikFieldsCount = n.offset("InstanceKlass", "_java_fields_count")
	o.ikConstants = n.offset("InstanceKlass", "_constants")
	o.arrayU2Length = n.offset("Array<int>", "_length")
	o.arrayU2Data = n.offset("Array<u2>", "_data")
	o.cpHolder = n.offset("ConstantPool", "_pool_holder")
	o.cpLength = n.offset("ConstantPool", "_length")
	o.cpSize = n.size("ConstantPool")
	o.symLength = n.offset("Symbol", "_length")
	o.symBody = n.offset("Symbol", "_body")
	o.fieldSlots = n.int("FieldInfo::field_slots")
	o.fieldAccess = n.int("FieldInfo::access_flags_offset")
	o.fieldName = n.int("FieldInfo::name_index_offset")
	o.fieldLow = n.int("FieldInfo::low_packed_offset")
	o.fieldHigh = n.int("FieldInfo::high_packed_offset")
	o.tagSize = n.int("FIELDINFO_TAG_SIZE")
	o.tagOffset = n.int("FIELDINFO_TAG_OFFSET")
	o.monOwner = n.offset("ObjectMonitor", "_owner")
	o.monObject = n.offset("ObjectMonitor", "_object")
	o.stateInJava = n.int("_thread_in_Java")
	o.stateInVM = n.int("_thread_in_vm")
	o.stateBlocked = n.int("_thread_blocked")
	o.stateInNative = n.int("_thread_in_native")
	o.flags = n.static("JVMFlag", "flags")
	o.numFlags = n.static("JVMFlag", "numFlags")
	o.flagAddr = n.offset("JVMFlag", "_addr")
	o.flagName = n.offset("JVMFlag", "_name")
	o.flagSize = n.size("JVMFlag")
	o.narrowOopBase = n.static("CompressedOops", "_narrow_oop._base")
	o.narrowOopShift = n.static("CompressedOops", "_narrow_oop._shift")
	o.narrowKlassBase = n.static("CompressedKlassPointers", "_narrow_klass._base")
	o.narrowKlassShift = n.static("CompressedKlassPointers", "_narrow_klass._shift")
	o.statusValues = map[int64]string{}
	for _, s := range []string{"NEW", "RUNNABLE", "SLEEPING", "IN_OBJECT_WAIT", "IN_OBJECT_WAIT_TIMED",
		"PARKED", "PARKED_TIMED", "BLOCKED_ON_MONITOR_ENTER", "TERMINATED"} {
		o.statusValues[n.int("JavaThreadStatus::"+s)] = s
	}
	if err := n.err("HotSpot's threads"); err != nil {
		return nil, err
	}
	if fieldInfoFits(o) != nil {
		return nil, fieldInfoFits(o)
	}
	if err := vm.readCompression(); err != nil {
		return nil, err
	}
	return vm, nil
}

// fieldInfoFits checks the FieldInfo constants: a field is a handful of
// u2s, its members inside it.
func fieldInfoFits(o *offsets) error {
	if o.fieldSlots <= 0 || o.fieldSlots > 16 {
		return fmt.Errorf("FieldInfo::field_slots %d: not a field's size", o.fieldSlots)
	}
	for _, m := range []int64{o.fieldAccess, o.fieldName, o.fieldLow, o.fieldHigh} {
		if m < 0 || m >= o.fieldSlots {
			return fmt.Errorf("FieldInfo member at %d: outside a field of %d slots", m, o.fieldSlots)
		}
	}
	if o.tagSize < 0 || o.tagSize > 8 {
		return fmt.Errorf("FIELDINFO_TAG_SIZE %d: out of range", o.tagSize)
	}
	return nil
}

// readCompression reads whether and how oops and class pointers are
// compressed (-XX:+UseCompressedOops, the default below 32 GiB of heap).
func (vm *VM) readCompression() error {
	var err error
	if vm.narrowOops, err = vm.BoolFlag("UseCompressedOops"); err != nil {
		return err
	}
	if vm.narrowKlass, err = vm.BoolFlag("UseCompressedClassPointers"); err != nil {
		return err
	}
	o := &vm.o
	if vm.oopBase, err = vm.r.U64(o.narrowOopBase, "CompressedOops::_narrow_oop._base"); err != nil {
		return err
	}
	shift, err := vm.r.U32(o.narrowOopShift, "CompressedOops::_narrow_oop._shift")
	if err != nil {
		return err
	}
	if vm.klassBase, err = vm.r.U64(o.narrowKlassBase, "CompressedKlassPointers::_narrow_klass._base"); err != nil {
		return err
	}
	kshift, err := vm.r.U32(o.narrowKlassShift, "CompressedKlassPointers::_narrow_klass._shift")
	if err != nil {
		return err
	}
	if shift > 8 || kshift > 8 {
		return fmt.Errorf("compressed pointer shifts %d and %d: HotSpot's are at most 3", shift, kshift)
	}
	vm.oopShift, vm.klassShift = uint(shift), uint(kshift)
	// An array's length follows the header: after a narrow class
	// pointer (12), or after a full one (16).
	vm.arrayLength = o.klassField + 8
	if vm.narrowKlass {
		vm.arrayLength = o.klassField + 4
	}
	return nil
}

// maxFlags bounds the JVMFlag table (JDK 17 has about 1,300 flags).
const maxFlags = 8192

// flagAddr returns the address of the named flag's value.
// The flag table does not change while the VM runs: it is read once per
// Layout, by the first reading that needs it.
func (vm *VM) flagAddr(name string) (uint64, error) {
	l := vm.l
	l.flagsOnce.Do(func() { l.flagAddrs, l.flagsErr = vm.readFlagTable() })
	if l.flagsErr != nil {
		return 0, l.flagsErr
	}
	a, ok := l.flagAddrs[name]
	if !ok {
		return 0, &FlagError{Name: name}
	}
	return a, nil
}

// readFlagTable reads the name and value address of every flag.
func (vm *VM) readFlagTable() (map[string]uint64, error) {
	o := &vm.o
	table, err := vm.r.U64(o.flags, "JVMFlag::flags")
	if err != nil {
		return nil, err
	}
	count, err := vm.r.U64(o.numFlags, "JVMFlag::numFlags")
	if err != nil {
		return nil, err
	}
	if count > maxFlags {
		return nil, fmt.Errorf("JVMFlag::numFlags %d: %w (%d)", count, ErrTooMany, maxFlags)
	}
	addrs := make(map[string]uint64, count)
	for i := uint64(0); i < count; i++ {
		e := table + i*o.flagSize
		np, err := vm.r.U64(e+o.flagName, "JVMFlag::_name")
		if err != nil {
			return nil, err
		}
		if np == 0 {
			continue // the table ends with an empty entry
		}
		n, err := vm.r.CString(np, maxVMName, "JVMFlag name")
		if err != nil {
			return nil, err
		}
		if addrs[n], err = vm.r.U64(e+o.flagAddr, "JVMFlag::_addr of "+n); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// FlagError says a flag is not in the VM's table.
type FlagError struct{ Name string }

func (e *FlagError) Error() string {
	return fmt.Sprintf("no flag %s in the VM's JVMFlag table", e.Name)
}

// BoolFlag reads a bool -XX flag's value as the VM has it now (after the
// command line, JAVA_TOOL_OPTIONS, flags files and ergonomics).
func (vm *VM) BoolFlag(name string) (bool, error) {
	a, err := vm.flagAddr(name)
	if err != nil {
		return false, err
	}
	v, err := vm.r.U8(a, "flag "+name)
	return v != 0, err
}
