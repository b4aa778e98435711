// block.js stops its main thread in a synchronous call, inside named
// JavaScript functions (handleRequest → waitForLock), the way a Node.js
// service freezes.
//
//   node [--perf-prof] [--perf-basic-prof] block.js [mode] [--after MS] [--beat FILE]
//
// mode is how it blocks:
//   atomics  Atomics.wait on memory nobody will change: a futex sleep (default)
//   spin     a busy loop that never yields: on the CPU, event loop stuck
//   read     fs.readSync on stdin: give it a pipe nobody writes to (it exits
//            when stdin reaches its end)
//
// It prints "ready <pid>" at once, touches FILE every 100 ms while it runs
// freely (a heartbeat for `stallwatch watch --heartbeat-file`), then after
// MS milliseconds (default 0) prints "blocking <mode>" and blocks for good.
'use strict';

const fs = require('fs');

const args = process.argv.slice(2);
const mode = args.find((a) => !a.startsWith('--') && !/^\d+$/.test(a) && a !== valueOf('--beat')) || 'atomics';
const after = Number(valueOf('--after') || 0);
const beat = valueOf('--beat');

function valueOf(flag) {
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
}

const cell = new Int32Array(new SharedArrayBuffer(4));

function waitForLock(timeout) {
  switch (mode) {
    case 'atomics':
      return Atomics.wait(cell, 0, 0, timeout);
    case 'spin': {
      const end = timeout === Infinity ? Infinity : Date.now() + timeout;
      let x = 0;
      while (Date.now() < end) x = (x * 31 + 7) % 1000003;
      return x;
    }
    case 'read':
      if (timeout === Infinity) {
        const buf = Buffer.alloc(1);
        while (fs.readSync(0, buf, 0, 1, null) > 0);
        process.stdout.write('stdin closed\n');
        process.exit(0);
      }
      return 'timed-out';
    default:
      throw new Error(`unknown mode ${mode}: atomics, spin or read`);
  }
}

function handleRequest(timeout) {
  return waitForLock(timeout);
}

// Call both functions often enough that V8 compiles them: a blocked
// stack then shows their names, not the interpreter's.
for (let i = 0; i < 20000; i++) handleRequest(0);

function touch() {
  if (!beat) return;
  const now = new Date();
  try {
    fs.utimesSync(beat, now, now);
  } catch {
    fs.writeFileSync(beat, '');
  }
}

process.stdout.write(`ready ${process.pid}\n`);
touch();
const beating = setInterval(touch, 100);
setTimeout(() => {
  clearInterval(beating);
  process.stdout.write(`blocking ${mode}\n`, () => handleRequest(Infinity));
}, after);
