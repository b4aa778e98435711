; after.ll: what before.ll executes in its place (see before.ll). Prints
; "swapped PID", then spins in hot_after for ever.
@sink = global i64 0
@swapped = private constant [12 x i8] c"swapped %d\0A\00"
declare i32 @printf(i8*, ...)
declare i32 @getpid()
declare i32 @fflush(i8*)

define i64 @hot_after(i64 %x) noinline {
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
  %f = getelementptr [12 x i8], [12 x i8]* @swapped, i32 0, i32 0
  call i32 (i8*, ...) @printf(i8* %f, i32 %pid)
  call i32 @fflush(i8* null)
  br label %spin
spin:
  %s = load volatile i64, i64* @sink
  %s1 = add i64 %s, 1
  %r = call i64 @hot_after(i64 %s1)
  store volatile i64 %r, i64* @sink
  br label %spin
}
