// fib.js keeps a CPU busy in one hot JavaScript function, `fibonacci`, so
// that profiles and JIT symbol files have a known name to find.
//
//   node [--perf-prof] [--perf-basic-prof] [--interpreted-frames-native-stack] fib.js [n]
//
// It warms fibonacci up until V8 has optimized it, prints
// "ready <pid>", then computes fibonacci(n) (default 25) forever in
// slices of 50 ms, so that its event loop still runs: a line
// "compile NAME" on stdin makes it define a new function NAME, run it
// until V8 compiles it, and print "compiled NAME" (the JIT's files grow
// while a test watches). Closing stdin does not stop it; a signal does.
'use strict';

function fibonacci(n) {
  return n < 2 ? n : fibonacci(n - 1) + fibonacci(n - 2);
}

const n = Number(process.argv[2] || 25);
let sink = 0;

function burn() {
  const end = Date.now() + 50;
  while (Date.now() < end) sink += fibonacci(n);
  setImmediate(burn);
}

// compile defines a function with the given name and calls it until the
// optimizing compiler has had it: a new CODE_LOAD in a jitdump and a new
// line in a perf map.
function compile(name) {
  const f = new Function(`return function ${name}(x) { let s = 0; for (let i = 0; i < x; i++) s += i % 7; return s; };`)();
  for (let i = 0; i < 20000; i++) sink += f(50);
  return f;
}

for (let i = 0; i < 200; i++) sink += fibonacci(18);
process.stdout.write(`ready ${process.pid}\n`);

let pending = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
  pending += chunk;
  let nl;
  while ((nl = pending.indexOf('\n')) >= 0) {
    const line = pending.slice(0, nl).trim();
    pending = pending.slice(nl + 1);
    const m = /^compile ([A-Za-z_$][\w$]*)$/.exec(line);
    if (m) {
      compile(m[1]);
      process.stdout.write(`compiled ${m[1]}\n`);
    }
  }
});
process.stdin.on('error', () => {});
setImmediate(burn);
