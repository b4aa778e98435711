// httpblock.js: an HTTP server whose event loop one request blocks. GET
// /block runs busyLoop, a synchronous loop that never returns to the event
// loop; every other request waits from then on.
//
//   node [--perf-basic-prof] httpblock.js    prints "ready <pid> <port>"
'use strict';

const http = require('http');

let sink = 0;

function busyLoop() {
  for (;;) {
    sink = (sink * 31 + 7) % 1000003;
  }
}

function handle(req, res) {
  if (req.url === '/block') {
    busyLoop();
  }
  res.end('ok\n');
}

const server = http.createServer(handle);
server.listen(0, '127.0.0.1', () => {
  console.log(`ready ${process.pid} ${server.address().port}`);
});
