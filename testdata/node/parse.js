// parse.js evaluates an arithmetic expression nested DEPTH parentheses
// deep (default 200) with a recursive descent parser, expr ← term ←
// factor ← expr …: three JavaScript frames per level, a stack as deep as
// a parser's, a template engine's or a schema validator's over nested
// input. Like those, it compiles its parser for each input (new
// Function), so that V8 runs it in its interpreter, as it runs all code
// that is new to it: with --interpreted-frames-native-stack each of those
// frames has a native frame of its own, and the stack is tens of KiB
// deep.
//
//   node [--interpreted-frames-native-stack] parse.js [DEPTH]
//
// It prints "ready <pid>" and parses in slices of 50 ms, so that its
// event loop still runs, until a signal stops it.
'use strict';

const depth = Number(process.argv[2] || 200);
const input = '(1+'.repeat(depth) + '1' + ')*2'.repeat(depth);

const parser = `
  let pos = 0;
  function expr() {
    let a = term();
    while (src[pos] === '+') {
      pos++;
      a = (a + term()) % 1000003;
    }
    return a;
  }
  function term() {
    let a = factor();
    while (src[pos] === '*') {
      pos++;
      a = (a * factor()) % 1000003;
    }
    return a;
  }
  function factor() {
    if (src[pos] === '(') {
      pos++;
      const v = expr();
      pos++; // ')'
      return v;
    }
    let n = 0;
    while (src[pos] >= '0' && src[pos] <= '9') {
      n = n * 10 + (src.charCodeAt(pos) - 48);
      pos++;
    }
    return n;
  }
  return expr();
`;

let sink = 0;

function burn() {
  const end = Date.now() + 50;
  while (Date.now() < end) sink += new Function('src', parser)(input);
  setImmediate(burn);
}

process.stdout.write(`ready ${process.pid}\n`);
setImmediate(burn);
