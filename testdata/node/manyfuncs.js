// manyfuncs.js makes many distinct JavaScript functions with `new Function`
// and calls each, so that a JIT log written with --perf-prof grows large:
// with --interpreted-frames-native-stack V8 writes one CODE_LOAD (with its
// code bytes) for every function's interpreter trampoline, as a big
// service's jitdump does.
//
//   node --perf-prof --interpreted-frames-native-stack manyfuncs.js [count]
//
// It prints "done <count> <pid>" and exits; with --wait it then waits for
// stdin to close, so that its files can be found while it lives.
'use strict';

const count = Number(process.argv.find((a, i) => i > 1 && /^\d+$/.test(a)) || 80000);
const wait = process.argv.includes('--wait');

let sink = 0;
for (let i = 0; i < count; i++) {
  // Distinct source text: V8 shares nothing between the functions.
  const f = new Function('x', `return x * ${i} + ${i % 7} /* generated function ${i} */;`);
  sink += f(i);
}
process.stdout.write(`done ${count} ${process.pid} ${sink > 0 ? 'ok' : ''}\n`);
if (wait) {
  process.stdin.resume();
  process.stdin.on('end', () => process.exit(0));
}
