// spin.js: a Node.js target that spends its time in one JS function, run
// with --perf-prof --interpreted-frames-native-stack so that V8 describes
// its compiled code in a jitdump.
'use strict';

function fibonacci(n) {
  return n < 2 ? n : fibonacci(n - 1) + fibonacci(n - 2);
}

let sink = 0;
// Warm up: V8 compiles fibonacci with its optimizing tiers.
for (let i = 0; i < 300; i++) sink += fibonacci(20);

// V8 writes the jitdump through a 2 MiB stdio buffer and never flushes it
// while the process runs: a process that then only spins would keep the
// records of its hottest code in memory. Call a few thousand new
// functions (each gets its own copy of the interpreter's entry code, a
// few KiB of jitdump) so the buffer spills what came before.
for (let i = 0; i < 3000; i++) sink += new Function('x', `return x + ${i};`)(i);
console.log('ready');

function spin() {
  for (;;) sink += fibonacci(24);
}
spin();
