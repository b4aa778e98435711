// jsstack.js stops its main thread inside known JavaScript functions,
// outer → middle → inner → block (or spin), after writing to STACKFILE
// the stack V8 itself gives of that moment (new Error().stack, all its
// frames), so that a reader of the frames from outside the process has
// the truth to compare with. The stack is taken on the line that then
// blocks or spins, so its top frame's line is where the thread is.
//
//   node [V8 flags] jsstack.js STACKFILE [block|spin] [warm|shapes|worker]
//
// block: Atomics.wait on memory nobody changes (a futex sleep, for about
// eleven days); spin: a busy loop that never ends. warm: first run the
// same chain 20,000 times without blocking (a zero timeout, a short loop)
// so that V8 optimizes it and may inline the callees into their callers.
// shapes: reach outer through functions of every shape a stack names
// differently: a class's constructor, method and static method, an
// object literal's method, a function assigned to a property (V8 infers
// its name), an arrow called by a builtin (Array.prototype.forEach).
// worker: the main thread starts a worker thread that runs the chain and
// blocks or spins, and idles in its event loop meanwhile.
// It prints "blocking" or "spinning" just before the last call.
'use strict';

const fs = require('fs');
const { Worker, isMainThread, workerData } = require('worker_threads');

Error.stackTraceLimit = Infinity;
const [out, mode = 'block', how] = isMainThread ? process.argv.slice(2) : workerData;
const fd = fs.openSync(out, 'w');
const cell = new Int32Array(new SharedArrayBuffer(4));
let sink = 0;

// record overwrites STACKFILE with the stack: every call writes the same
// stack, so the file holds it whenever the last call blocks.
function record(s) {
  fs.writeSync(fd, s, 0);
  fs.ftruncateSync(fd, Buffer.byteLength(s));
}

function block(timeout) {
  record(new Error().stack); return Atomics.wait(cell, 0, 0, timeout);
}

function spin(forever) {
  record(new Error().stack); for (let i = 0; forever || i < 10; i++) sink = (sink * 31 + i) % 1000003; return sink;
}

function inner(last) {
  return mode === 'spin' ? spin(last) : block(last ? 1e9 : 0);
}

function middle(last) {
  return inner(last);
}

function outer(last) {
  return middle(last);
}

class Server {
  constructor() {
    this.start();
  }

  start() {
    Server.run();
  }

  static run() {
    handlers.dispatch();
  }
}

const handlers = {
  dispatch() {
    [1].forEach(() => routes.handle());
  },
};

const routes = {};
routes.handle = function () {
  return outer(true);
};

if (how === 'worker' && isMainThread) {
  new Worker(__filename, { workerData: [out, mode, 'in worker'], stdout: false });
  setInterval(() => {}, 1000);
} else {
  if (how === 'warm') for (let i = 0; i < 20000; i++) outer(false);
  fs.writeSync(1, (mode === 'spin' ? 'spinning' : 'blocking') + '\n');
  if (how === 'shapes') new Server();
  else outer(true);
}
