; spin.ll: a program for lli (LLVM 14), which compiles it with its JIT and
; registers the object with the GDB JIT interface: main ← outer ← middle ←
; leaf, each kept out of line, in code LLVM builds without frame pointers.
; It prints "ready" and spins until killed.
@sink = global i64 0

define internal i64 @leaf(i64 %x) noinline {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %h = phi i64 [ %x, %entry ], [ %h1, %loop ]
  %m = mul i64 %h, 6364136223846793005
  %h1 = add i64 %m, 1442695040888963407
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, 4096
  br i1 %c, label %loop, label %done
done:
  ret i64 %h1
}

define internal i64 @middle(i64 %x) noinline {
  %v = call i64 @leaf(i64 %x)
  %s = load volatile i64, i64* @sink
  %s1 = add i64 %s, %v
  store volatile i64 %s1, i64* @sink
  %r = xor i64 %v, %x
  ret i64 %r
}

define internal i64 @outer(i64 %x) noinline {
  %v = call i64 @middle(i64 %x)
  %s = load volatile i64, i64* @sink
  %s1 = add i64 %s, %v
  store volatile i64 %s1, i64* @sink
  %r = add i64 %v, 7
  ret i64 %r
}

declare i32 @puts(i8*)
declare i32 @fflush(i8*)
@ready = private constant [6 x i8] c"ready\00"

define i32 @main() {
entry:
  %p = getelementptr [6 x i8], [6 x i8]* @ready, i64 0, i64 0
  call i32 @puts(i8* %p)
  call i32 @fflush(i8* null)
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %v = call i64 @outer(i64 %i)
  %s = load volatile i64, i64* @sink
  %s1 = add i64 %s, %v
  store volatile i64 %s1, i64* @sink
  %i1 = add i64 %i, 1
  br label %loop
}
