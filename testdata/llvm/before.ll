; before.ll: run by lli --jit-kind=mcjit (LLVM's PerfJITEventListener
; writes a jitdump under $JITDUMPDIR), it spins in hot_before until a line
; comes on stdin, then executes
;   LLI --jit-kind=mcjit AFTER
; (its arguments 1 and 2): the same process now runs after.ll's code,
; which the JIT loads where this code was when the address space is laid
; out the same (setarch -R). Continuous profiling's test of JIT code
; replaced during a run: each period must name the code of its own time.
;
;   lli --jit-kind=mcjit before.ll /usr/bin/lli after.ll
;
; Prints "ready PID" first.
@sink = global i64 0
@ready = private constant [10 x i8] c"ready %d\0A\00"
@mcjit = private constant [17 x i8] c"--jit-kind=mcjit\00"
declare i32 @printf(i8*, ...)
declare i32 @getpid()
declare i32 @fflush(i8*)
declare i32 @execv(i8*, i8**)
declare i32 @poll({ i32, i16, i16 }*, i64, i32)

; hot_before and after.ll's hot_after are the same code under two names.
define i64 @hot_before(i64 %x) noinline {
entry:
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %loop]
  %v = phi i64 [%x, %entry], [%v3, %loop]
  %a = shl i64 %v, 13
  %v1 = xor i64 %v, %a
  %b = lshr i64 %v1, 7
  %v2 = xor i64 %v1, %b
  %c = shl i64 %v2, 17
  %v3 = xor i64 %v2, %c
  %i1 = add i32 %i, 1
  %done = icmp eq i32 %i1, 100000
  br i1 %done, label %out, label %loop
out:
  ret i64 %v3
}

define i32 @main(i32 %argc, i8** %argv) {
entry:
  %pid = call i32 @getpid()
  %f = getelementptr [10 x i8], [10 x i8]* @ready, i32 0, i32 0
  call i32 (i8*, ...) @printf(i8* %f, i32 %pid)
  call i32 @fflush(i8* null)
  %pfd = alloca { i32, i16, i16 }
  br label %spin
spin:
  %s = load volatile i64, i64* @sink
  %s1 = add i64 %s, 1
  %r = call i64 @hot_before(i64 %s1)
  store volatile i64 %r, i64* @sink
  ; poll stdin without waiting: a line (or its end) means swap
  %fd = getelementptr { i32, i16, i16 }, { i32, i16, i16 }* %pfd, i32 0, i32 0
  store i32 0, i32* %fd
  %ev = getelementptr { i32, i16, i16 }, { i32, i16, i16 }* %pfd, i32 0, i32 1
  store i16 1, i16* %ev
  %rev = getelementptr { i32, i16, i16 }, { i32, i16, i16 }* %pfd, i32 0, i32 2
  store i16 0, i16* %rev
  %n = call i32 @poll({ i32, i16, i16 }* %pfd, i64 1, i32 0)
  %got = icmp sgt i32 %n, 0
  br i1 %got, label %swap, label %spin
swap:
  %lli_p = getelementptr i8*, i8** %argv, i32 1
  %lli = load i8*, i8** %lli_p
  %after_p = getelementptr i8*, i8** %argv, i32 2
  %after = load i8*, i8** %after_p
  %args = alloca [4 x i8*]
  %g0 = getelementptr [4 x i8*], [4 x i8*]* %args, i32 0, i32 0
  store i8* %lli, i8** %g0
  %g1 = getelementptr [4 x i8*], [4 x i8*]* %args, i32 0, i32 1
  %mk = getelementptr [17 x i8], [17 x i8]* @mcjit, i32 0, i32 0
  store i8* %mk, i8** %g1
  %g2 = getelementptr [4 x i8*], [4 x i8*]* %args, i32 0, i32 2
  store i8* %after, i8** %g2
  %g3 = getelementptr [4 x i8*], [4 x i8*]* %args, i32 0, i32 3
  store i8* null, i8** %g3
  call i32 @execv(i8* %lli, i8** %g0)
  ret i32 1
}
