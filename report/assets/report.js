// report.html's viewer: a flame graph (or icicle) with zoom, search and
// click to focus, a per-thread timeline with a time range to filter by,
// switches between on-CPU, off-CPU and wall time and between phases. It
// reads the JSON in #sw-data (see report/page.go for its layout), needs
// nothing from the network, and writes every name it shows with
// textContent, never as HTML.
(function () {
  'use strict';
  var dataEl = document.getElementById('sw-data');
  if (!dataEl) return;
  var T0 = performance.now(), timing = { before: Math.round(T0) };
  function lap(what) { var t = performance.now(); timing[what] = Math.round(t - T0); T0 = t; }
  var D = JSON.parse(dataEl.textContent);
  lap('parse');
  var S = D.strings;
  // a column: zigzag varints in base64 (page.go's column)
  function col(b64) {
    var bin = atob(b64), out = [], v = 0, mul = 1;
    for (var j = 0; j < bin.length; j++) {
      var c = bin.charCodeAt(j);
      v += (c & 127) * mul;
      if (c < 128) { out.push(v % 2 ? -(v + 1) / 2 : v / 2); v = 0; mul = 1; } else mul *= 128;
    }
    return out;
  }
  var FR = col(D.frames);

  // ---- frames and the call tree
  var NF = FR.length / 3;
  var ND = col(D.nodes);
  var NN = ND.length / 2;
  var parent = new Int32Array(NN), nframe = new Int32Array(NN), depth = new Int32Array(NN);
  for (var i = 0; i < NN; i++) {
    parent[i] = i === 0 ? -1 : i - ND[2 * i];
    nframe[i] = ND[2 * i + 1];
    depth[i] = i === 0 ? 0 : depth[parent[i]] + 1;
  }
  // frames whose callers are unknown (the stack was cut short): why
  var CUT = {}, CU = col(D.cuts);
  for (i = 0; i < CU.length; i += 2) CUT[CU[i]] = S[CU[i + 1]];
  function fname(f) { return S[FR[3 * f]]; }
  function fkind(f) { return FR[3 * f + 1]; }
  function fmod(f) { return S[FR[3 * f + 2]]; }
  function nodeName(n) { return n === 0 ? 'all' : fname(nframe[n]); }
  // children: the nodes come depth first, callees in alphabetical order,
  // as flame graphs lay them out
  var kids = [];
  for (i = 0; i < NN; i++) kids.push(null);
  for (i = 1; i < NN; i++) {
    var p = parent[i];
    if (!kids[p]) kids[p] = [];
    kids[p].push(i);
  }

  // ---- samples
  var sm = {
    t: col(D.samples.t), n: col(D.samples.n), e: col(D.samples.e), w: col(D.samples.w), c: col(D.samples.c)
  };
  var N = sm.t.length;
  var sT = new Int32Array(N), sN = new Int32Array(N), sE = new Float64Array(N), sW = new Float64Array(N), sK = new Uint8Array(N), sP = new Uint8Array(N);
  var acc = 0;
  for (i = 0; i < N; i++) {
    sT[i] = sm.t[i]; sN[i] = sm.n[i]; acc += sm.e[i]; sE[i] = acc;
    sK[i] = (sm.c[i] / 3) | 0; sP[i] = sm.c[i] % 3;
    sW[i] = sm.w[i] === 0 && sK[i] === 0 ? D.period : sm.w[i];
  }
  lap('tree');
  var threads = D.threads;
  var perThread = threads.map(function () { return []; });
  for (i = 0; i < N; i++) perThread[sT[i]].push(i);

  // ---- state
  var st = {
    mode: '',
    phase: D.phases.indexOf('during') >= 0 ? 'during' : 'all',
    range: null, // [fromUs, toUs]
    thread: -1, // index into threads, -1: all
    focus: 0,
    search: '',
    flame: false // false: icicle (root on top)
  };
  st.mode = firstMode();
  function hasMode(id) { return D.modes.some(function (m) { return m.id === id; }); }
  // What a user wants first: where the CPU went in the phase shown, when
  // any did; else where the threads waited. Wall time adds every idle
  // thread's wait to the few that matter.
  function firstMode() {
    if (!D.modes.length) return '';
    if (hasMode('cpu')) {
      for (var j = 0; j < N; j++) if (sK[j] === 0 && phaseIn(sP[j])) return 'cpu';
    }
    if (hasMode('off')) return 'off';
    return D.modes[0].id;
  }
  function unit() {
    for (var j = 0; j < D.modes.length; j++) if (D.modes[j].id === st.mode) return D.modes[j].unit;
    return 'us';
  }
  function modeLabel() {
    for (var j = 0; j < D.modes.length; j++) if (D.modes[j].id === st.mode) return D.modes[j].label;
    return '';
  }

  // ---- formatting
  function fmtUs(us) {
    var a = Math.abs(us), s = us < 0 ? '-' : '';
    if (a < 1) return '0s';
    if (a < 1000) return s + trim(a) + 'µs';
    if (a < 1e6) return s + trim(a / 1e3) + 'ms';
    if (a < 6e7) return s + trim(a / 1e6) + 's';
    return s + Math.floor(a / 6e7) + 'm' + pad2(Math.round((a % 6e7) / 1e6)) + 's';
  }
  function trim(v) { return (v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0)).replace(/\.?0+$/, ''); }
  function pad2(v) { return v < 10 ? '0' + v : '' + v; }
  function fmtVal(v) { return unit() === 'us' ? fmtUs(v) : Math.round(v).toLocaleString('en-US'); }
  function pctOf(v, t) { return t > 0 ? (100 * v / t).toFixed(1) + '%' : '-'; }
  function el(tag, cls, text) { var e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; }
  function $(id) { return document.getElementById(id); }

  // ---- which samples count, and for how much
  function kindIn(k) {
    switch (st.mode) {
      case 'cpu': return k === 0;
      case 'off': return k !== 0;
    }
    return true;
  }
  function phaseIn(ph) {
    if (st.phase === 'during') return ph === 0;
    if (st.phase === 'before') return ph === 1;
    return true;
  }
  function weight(i) {
    if (!kindIn(sK[i]) || !phaseIn(sP[i])) return 0;
    if (st.thread >= 0 && sT[i] !== st.thread) return 0;
    var w = sW[i];
    if (st.range) {
      var end = sE[i], start = unit() === 'us' ? end - w : end;
      var lo = Math.max(start, st.range[0]), hi = Math.min(end, st.range[1]);
      if (unit() !== 'us') return end >= st.range[0] && end <= st.range[1] ? w : 0;
      if (hi <= lo) return 0;
      w = hi - lo;
    }
    return w;
  }
  var total = new Float64Array(NN);
  function aggregate() {
    total.fill(0);
    for (var j = 0; j < N; j++) {
      var w = weight(j);
      if (w) total[sN[j]] += w;
    }
    for (var n = NN - 1; n > 0; n--) total[parent[n]] += total[n];
  }

  // ---- search
  var matchFrame = new Uint8Array(NF);
  function compileSearch() {
    matchFrame.fill(0);
    var q = st.search;
    if (!q) return;
    var re = null;
    try { re = new RegExp(q, 'i'); } catch (e) { re = null; }
    var lq = q.toLowerCase();
    for (var f = 0; f < NF; f++) {
      var nm = fname(f);
      if (re ? re.test(nm) : nm.toLowerCase().indexOf(lq) >= 0) matchFrame[f] = 1;
    }
  }
  function matchedTotal(root) {
    // the weight under the outermost matching frame of each path below root
    var sum = 0, inm = new Uint8Array(NN);
    for (var n = 1; n < NN; n++) {
      if (!inSubtree(n, root)) continue;
      var m = matchFrame[nframe[n]] === 1;
      var pin = n === root ? 0 : inm[parent[n]];
      if (m && !pin) sum += total[n];
      inm[n] = pin || (m ? 1 : 0);
    }
    return sum;
  }
  function inSubtree(n, root) {
    if (root === 0) return true;
    while (n > 0 && depth[n] > depth[root]) n = parent[n];
    return n === root;
  }

  // ---- flame graph
  var ROW = 18;
  var flameEl = $('sw-flame'), tip = $('sw-tip');
  function drawFlame() {
    aggregate();
    var W = Math.max(flameEl.clientWidth, 200);
    var focus = st.focus;
    if (focus !== 0 && total[focus] === 0) focus = st.focus = 0;
    var chain = [];
    for (var n = focus; n !== 0; n = parent[n]) chain.unshift(n);
    var maxD = 0;
    var boxes = [];
    // the focused frame's callers, full width
    boxes.push([0, 0, W, 0]);
    for (var j = 0; j < chain.length; j++) boxes.push([chain[j], 0, W, j + 1]);
    var base = chain.length;
    var ftotal = total[focus];
    function lay(n, x, w, d) {
      if (d > 400) return;
      maxD = Math.max(maxD, d);
      var ks = kids[n];
      if (!ks) return;
      var cx = x;
      for (var k = 0; k < ks.length; k++) {
        var c = ks[k], t = total[c];
        if (!t) continue;
        var cw = w * t / total[n];
        if (cw >= 1.5) {
          boxes.push([c, cx, cw, d + 1]);
          lay(c, cx, cw, d + 1);
        }
        cx += cw;
      }
    }
    if (ftotal > 0) lay(focus, 0, W, base);
    maxD = Math.max(maxD, base);
    var H = (maxD + 1) * ROW;
    flameEl.style.height = H + 'px';
    var frag = document.createDocumentFragment();
    var searching = !!st.search;
    for (j = 0; j < boxes.length; j++) {
      var b = boxes[j], nd = b[0];
      var div = document.createElement('div');
      var f = nd === 0 ? -1 : nframe[nd];
      var cls = 'fr k' + (f < 0 ? 'r' : fkind(f));
      if (searching && f >= 0 && matchFrame[f]) cls += ' match';
      if (nd !== 0 && b[3] <= base && nd !== focus) cls += ' anc';
      if (nd === 0 && focus !== 0) cls += ' anc';
      if (f >= 0 && CUT[f] !== undefined) cls += ' cut';
      div.className = cls;
      var top = st.flame ? H - (b[3] + 1) * ROW : b[3] * ROW;
      div.style.cssText = 'left:' + b[1].toFixed(1) + 'px;width:' + Math.max(b[2] - 1, 0.5).toFixed(1) + 'px;top:' + top + 'px';
      if (f >= 0 && !(fkind(f) === 2 || fkind(f) === 1)) div.style.backgroundColor = warm(fname(f));
      div.setAttribute('data-n', nd);
      if (b[2] > 28) div.textContent = nodeName(nd);
      frag.appendChild(div);
    }
    flameEl.textContent = '';
    flameEl.appendChild(frag);
    // totals, the matched share, the path to the focus
    var all = total[0];
    $('sw-total').textContent = 'total ' + fmtVal(all) + ' ' + modeLabel() + ' — ' + phaseText() + (st.thread >= 0 ? ', ' + threadLabel(st.thread) : '') + (st.range ? ', ' + fmtUs(st.range[0] - relTrig()) + ' … ' + fmtUs(st.range[1] - relTrig()) + ' from the trigger' : '');
    $('sw-total').setAttribute('data-total', String(all));
    var m = $('sw-matched');
    if (searching) {
      var mt = matchedTotal(focus);
      m.textContent = 'matched ' + pctOf(mt, ftotal) + ' (' + fmtVal(mt) + ')' + (focus !== 0 ? ' of the focused frame' : '');
      m.setAttribute('data-share', ftotal > 0 ? String(mt / ftotal) : '0');
    } else {
      m.textContent = '';
      m.removeAttribute('data-share');
    }
    var bc = $('sw-crumbs');
    bc.textContent = '';
    var names = [0].concat(chain);
    names.forEach(function (nd, ix) {
      var a = el('a', null, nodeName(nd));
      a.href = '#flame';
      a.addEventListener('click', function (ev) { ev.preventDefault(); st.focus = nd; drawFlame(); });
      if (ix) bc.appendChild(document.createTextNode(' › '));
      bc.appendChild(a);
    });
    $('sw-reset').disabled = focus === 0;
  }
  function phaseText() {
    if (st.phase === 'during') return 'during the stall';
    if (st.phase === 'before') return 'before the trigger';
    return D.phases.length > 1 ? 'before and during' : 'whole capture';
  }
  var warmCache = {};
  function warm(name) {
    var c = warmCache[name];
    if (c) return c;
    return (warmCache[name] = warmColor(name));
  }
  function warmColor(name) {
    var h = 0;
    for (var j = 0; j < name.length; j++) h = (h * 31 + name.charCodeAt(j)) | 0;
    h = Math.abs(h);
    return 'hsl(' + (h % 40) + ',75%,' + (62 + (h >> 6) % 14) + '%)';
  }
  function frameAt(ev) {
    var t = ev.target;
    if (!t || !t.getAttribute) return -1;
    var v = t.getAttribute('data-n');
    return v == null ? -1 : +v;
  }
  flameEl.addEventListener('click', function (ev) {
    var n = frameAt(ev);
    if (n < 0) return;
    st.focus = n;
    drawFlame();
  });
  flameEl.addEventListener('mousemove', function (ev) {
    var n = frameAt(ev);
    if (n < 0) { hideTip(); return; }
    var lines = [nodeName(n)];
    var f = n === 0 ? -1 : nframe[n];
    if (f >= 0 && fmod(f)) lines.push(fmod(f) + (fkind(f) === 1 ? ' (kernel)' : fkind(f) === 2 ? ' (JIT)' : ''));
    if (f >= 0 && CUT[f] !== undefined) lines.push('callers unknown: ' + CUT[f]);
    lines.push(fmtVal(total[n]) + ' — ' + pctOf(total[n], total[0]) + ' of all, ' + pctOf(total[n], total[n === 0 ? 0 : parent[n]]) + ' of its caller');
    lines.push('click to focus');
    showTip(ev, lines);
  });
  flameEl.addEventListener('mouseleave', hideTip);

  function showTip(ev, lines) {
    tip.textContent = '';
    lines.forEach(function (l, ix) { tip.appendChild(el('div', ix === 0 ? 'tt' : null, l)); });
    tip.style.display = 'block';
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var r = tip.getBoundingClientRect();
    if (x + r.width > window.innerWidth - 8) x = Math.max(8, ev.clientX - r.width - 14);
    if (y + r.height > window.innerHeight - 8) y = Math.max(8, ev.clientY - r.height - 14);
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }
  function hideTip() { tip.style.display = 'none'; }

  // ---- controls
  function buttons(id, items, get, set) {
    var box = $(id);
    if (!box) return;
    box.textContent = '';
    items.forEach(function (it) {
      var b = el('button', get() === it[0] ? 'on' : '', it[1]);
      b.id = id + '-' + (it[0] || 'none');
      b.type = 'button';
      b.addEventListener('click', function () { set(it[0]); buttons(id, items, get, set); drawFlame(); });
      box.appendChild(b);
    });
  }
  function controls() {
    buttons('sw-mode', D.modes.map(function (m) { return [m.id, m.label]; }), function () { return st.mode; }, function (v) { st.mode = v; });
    var ph = [];
    if (D.phases.indexOf('during') >= 0) ph.push(['during', 'during the stall']);
    if (D.phases.indexOf('before') >= 0) ph.push(['before', 'before the trigger']);
    ph.push(['all', ph.length ? 'both' : 'all']);
    buttons('sw-phase', ph, function () { return st.phase; }, function (v) { st.phase = v; });
    buttons('sw-orient', [['icicle', 'icicle'], ['flame', 'flame graph']], function () { return st.flame ? 'flame' : 'icicle'; }, function (v) { st.flame = v === 'flame'; });
    var chips = $('sw-chips');
    chips.textContent = '';
    if (st.thread >= 0) chips.appendChild(chip(threadLabel(st.thread), function () { st.thread = -1; }));
    if (st.range) chips.appendChild(chip('time ' + fmtUs(st.range[0] - relTrig()) + ' … ' + fmtUs(st.range[1] - relTrig()), function () { st.range = null; drawTimeline(); }));
  }
  function chip(text, clear) {
    var c = el('span', 'chip', text + ' ');
    var x = el('button', null, '×');
    x.type = 'button';
    x.title = 'clear';
    x.addEventListener('click', function () { clear(); refresh(); });
    c.appendChild(x);
    return c;
  }
  function refresh() { controls(); drawFlame(); drawTimeline(); }
  var search = $('sw-search');
  var searchTimer = 0;
  search.addEventListener('input', function () {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(function () { st.search = search.value; compileSearch(); drawFlame(); }, 120);
  });
  search.addEventListener('keydown', function (ev) {
    if (ev.key === 'Enter') { clearTimeout(searchTimer); st.search = search.value; compileSearch(); drawFlame(); }
  });
  $('sw-reset').addEventListener('click', function () { st.focus = 0; drawFlame(); });

  function threadLabel(ix) {
    var t = threads[ix];
    return 'tid ' + t.tid + (t.name ? ' "' + t.name + '"' : '');
  }
  function threadIndex(tid) {
    for (var j = 0; j < threads.length; j++) if (threads[j].tid === tid) return j;
    return -1;
  }

  // ---- timeline
  var tl = $('sw-timeline'), tlLabels = $('sw-tl-labels'), tlBox = $('sw-tl');
  var TROW = 16;
  var rows = [];
  threads.forEach(function (t, ix) { if (perThread[ix].length || t.dump) rows.push(ix); });
  // a thread the snapshot found off the CPU since before the samples
  function offSpan(ix) {
    var t = threads[ix];
    return t.offKnown && t.snapUs >= 0 ? [Math.max(t.offSinceUs, 0), t.snapUs, t.offSinceUs] : null;
  }
  function relTrig() { return D.triggerUs >= 0 ? D.triggerUs : 0; }
  function tlGeom() {
    var w = Math.max(tl.clientWidth, 100);
    return { w: w, t0: 0, t1: Math.max(D.endUs, 1) };
  }
  function xOf(g, us) { return (us - g.t0) / (g.t1 - g.t0) * g.w; }
  function usOf(g, x) { return g.t0 + x / g.w * (g.t1 - g.t0); }
  var COLORS = ['#2f9e44', '#74a9cf', '#f08c00']; // on-CPU, blocked, runnable-waiting
  // a pixel's RGBA as a little-endian Uint32
  function rgba(r, g, b) { return (255 << 24 | b << 16 | g << 8 | r) >>> 0; }
  function drawTimeline() {
    if (!tl || !D.timed) return;
    var g = tlGeom();
    var dpr = window.devicePixelRatio || 1;
    var H = rows.length * TROW + 18;
    tl.width = Math.round(g.w * dpr);
    tl.height = Math.round(H * dpr);
    tl.style.height = H + 'px';
    tlLabels.style.height = H + 'px';
    var cx = tl.getContext('2d');
    cx.setTransform(dpr, 0, 0, dpr, 0, 0);
    cx.clearRect(0, 0, g.w, H);
    // Rows are drawn into one image, pixel by pixel: each pixel column
    // of a row in the state its thread spent most of that time in (on a
    // CPU winning ties), hatched where only the snapshot knows it was off
    // the CPU. One putImageData instead of a fillRect per sample.
    var PW = tl.width, PH = tl.height;
    var img = cx.createImageData(PW, PH);
    var px32 = new Uint32Array(img.data.buffer);
    var RGBA = [rgba(0x2f, 0x9e, 0x44), rgba(0x74, 0xa9, 0xcf), rgba(0xf0, 0x8c, 0x00)];
    var HATCH = [rgba(0xb7, 0xd3, 0xe9), rgba(0x74, 0xa9, 0xcf)];
    var BAND = [rgba(0xf6, 0xf6, 0xf9), rgba(0xff, 0xf3, 0xbf)];
    var cov = new Float32Array(PW * 3);
    var scale = PW / (g.t1 - g.t0);
    rows.forEach(function (ix, r) {
      var y0 = Math.round(r * TROW * dpr), y1 = Math.round((r + 1) * TROW * dpr);
      var b0 = y0 + Math.round(2 * dpr), b1 = y1 - Math.round(2 * dpr);
      if (ix === st.thread || r % 2) {
        var band = BAND[ix === st.thread ? 1 : 0];
        for (var yy = y0; yy < y1; yy++) px32.fill(band, yy * PW, yy * PW + PW);
      }
      var sp = offSpan(ix);
      if (sp) {
        var h0 = Math.max(0, Math.floor((sp[0] - g.t0) * scale)), h1 = Math.min(PW, Math.ceil((sp[1] - g.t0) * scale));
        for (yy = b0; yy < b1; yy++) for (var xx = h0; xx < h1; xx++) px32[yy * PW + xx] = HATCH[(xx + yy) % 4 === 0 ? 1 : 0];
      }
      cov.fill(0);
      var list = perThread[ix];
      for (var j = 0; j < list.length; j++) {
        var s = list[j], k = sK[s];
        var a = (sE[s] - sW[s] - g.t0) * scale, b = (sE[s] - g.t0) * scale;
        if (b < 0 || a > PW) continue;
        if (b - a < 1) b = a + 1; // a sample is at least a pixel
        var p0 = Math.max(0, Math.floor(a)), p1 = Math.min(PW - 1, Math.floor(b - 1e-9));
        for (var x = p0; x <= p1; x++) cov[x * 3 + k] += Math.min(b, x + 1) - Math.max(a, x);
      }
      for (x = 0; x < PW; x++) {
        var c0 = cov[x * 3], c1 = cov[x * 3 + 1], c2 = cov[x * 3 + 2];
        var m = Math.max(c0, c1, c2);
        if (m <= 0.05) continue;
        var color = RGBA[c0 === m ? 0 : c2 === m ? 2 : 1];
        for (yy = b0; yy < b1; yy++) px32[yy * PW + x] = color;
      }
    });
    cx.putImageData(img, 0, 0);
    // markers
    var yb = rows.length * TROW;
    function mark(us, color, text) {
      if (us < 0) return;
      var x = Math.round(xOf(g, us)) + 0.5;
      cx.strokeStyle = color; cx.lineWidth = 1.5;
      cx.beginPath(); cx.moveTo(x, 0); cx.lineTo(x, yb); cx.stroke();
      cx.fillStyle = color; cx.font = '11px system-ui,sans-serif';
      var tw = cx.measureText(text).width;
      cx.fillText(text, Math.min(Math.max(x + 3, 0), g.w - tw - 2), yb + 13);
    }
    if (st.range) {
      var rx0 = xOf(g, st.range[0]), rx1 = xOf(g, st.range[1]);
      cx.fillStyle = 'rgba(95,61,196,0.18)';
      cx.fillRect(rx0, 0, rx1 - rx0, yb);
    }
    mark(D.lastBeatUs, '#868e96', 'last beat');
    mark(D.triggerUs, '#e03131', 'trigger');
    mark(D.recoverUs, '#2b8a3e', 'recovered');
    // labels
    tlLabels.textContent = '';
    rows.forEach(function (ix) {
      var t = threads[ix];
      var a = el('a', 'tl-label' + (ix === st.thread ? ' on' : ''), t.tid + ' ' + (t.name || ''));
      a.href = '#thread-' + t.tid;
      a.title = threadLabel(ix) + (t.state ? ' — state ' + t.state : '') + (t.waits ? ' — ' + t.waits : '') + ' (click: show only this thread)';
      a.setAttribute('data-tid', t.tid);
      a.addEventListener('click', function (ev) { ev.preventDefault(); st.thread = st.thread === ix ? -1 : ix; refresh(); });
      tlLabels.appendChild(a);
    });
    var ax = $('sw-tl-axis');
    if (ax) ax.textContent = 'time from the trigger: ' + fmtUs(-relTrig()) + ' … ' + fmtUs(D.endUs - relTrig()) + (D.startMs ? ' (window starts ' + new Date(D.startMs).toISOString().replace('T', ' ').replace('Z', ' UTC') + ')' : '');
  }
  // the sample of thread ix covering time us (or the nearest within slack)
  function sampleAt(ix, us, slack) {
    var list = perThread[ix];
    var lo = 0, hi = list.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (sE[list[mid]] < us) lo = mid + 1; else hi = mid; }
    var best = -1, bd = Infinity;
    for (var j = Math.max(0, lo - 4); j < Math.min(list.length, lo + 64); j++) {
      var s = list[j], a = sE[s] - sW[s], b = sE[s];
      var d = us < a ? a - us : us > b ? us - b : 0;
      if (d === 0 && (best < 0 || bd > 0 || sK[s] === 0)) { best = s; bd = 0; if (sK[s] === 0) break; }
      else if (d < bd) { best = s; bd = d; }
    }
    // a long off-CPU interval may end far after us
    if (bd > 0) {
      for (j = lo; j < list.length; j++) {
        s = list[j];
        if (sE[s] - sW[s] <= us && us <= sE[s]) { best = s; bd = 0; break; }
        if (sE[s] - sW[s] > us + slack * 100) break;
      }
    }
    return bd <= slack ? best : -1;
  }
  function stackLines(s, max) {
    var out = [];
    for (var n = sN[s]; n !== 0 && out.length < max; n = parent[n]) {
      var f = nframe[n];
      out.push((fkind(f) === 1 ? '[k] ' : '') + fname(f));
    }
    return out;
  }
  var STATE = ['on CPU', 'blocked (off CPU)', 'runnable, waiting for a CPU'];
  var drag = null;
  if (tl) {
    tl.addEventListener('mousemove', function (ev) {
      var r = tl.getBoundingClientRect(), g = tlGeom();
      var x = ev.clientX - r.left, y = ev.clientY - r.top;
      tip.setAttribute('data-at', Math.round(x) + ',' + Math.round(y));
      tip.setAttribute('data-state', '');
      if (drag) { drag.x1 = x; drawDrag(g); return; }
      var row = Math.floor(y / TROW);
      if (row < 0 || row >= rows.length) { hideTip(); return; }
      var ix = rows[row], us = usOf(g, x);
      var s = sampleAt(ix, us, (g.t1 - g.t0) / g.w * 2);
      var lines = [threadLabel(ix) + ' at ' + fmtUs(us - relTrig()) + (D.triggerUs >= 0 ? (us < D.triggerUs ? ' (before the trigger)' : ' (after the trigger)') : '')];
      var state = '';
      var sp = offSpan(ix);
      if (s < 0 && sp && us >= sp[0] - 1 && us <= sp[1]) {
        state = 'blocked';
        lines.push('blocked (off the CPU since ' + fmtUs(sp[2] - relTrig()) + ', as the thread snapshot found it at ' + fmtUs(sp[1] - relTrig()) + ')');
        var stk = threads[ix].stack || [];
        for (var j = 0; j < stk.length && j < 24; j++) lines.push(S[stk[j]]);
      } else if (s < 0) lines.push('no sample here');
      else {
        state = ['oncpu', 'blocked', 'runnable'][sK[s]];
        lines.push(STATE[sK[s]] + (sK[s] ? ' for ' + fmtUs(sW[s]) : ''));
        if (sK[s] === 1 && sp && sE[s] - sW[s] <= sp[1]) {
          // the sampled wait began before the snapshot, which knows more
          lines.push('off the CPU since ' + fmtUs(sp[2] - relTrig()) + ', as the thread snapshot found it');
        }
        lines = lines.concat(stackLines(s, 24));
      }
      showTip(ev, lines);
      tip.setAttribute('data-state', state);
    });
    tl.addEventListener('mouseleave', function () { hideTip(); });
    tl.addEventListener('mousedown', function (ev) {
      var r = tl.getBoundingClientRect();
      drag = { x0: ev.clientX - r.left, x1: ev.clientX - r.left };
      ev.preventDefault();
    });
    window.addEventListener('mouseup', function () {
      if (!drag) return;
      var g = tlGeom(), d = drag;
      drag = null;
      if (Math.abs(d.x1 - d.x0) < 4) { drawTimeline(); return; }
      var a = usOf(g, Math.max(0, Math.min(d.x0, d.x1))), b = usOf(g, Math.min(g.w, Math.max(d.x0, d.x1)));
      st.range = [a, b];
      refresh();
    });
  }
  function drawDrag(g) {
    drawTimeline();
    var cx = tl.getContext('2d');
    var a = Math.min(drag.x0, drag.x1), b = Math.max(drag.x0, drag.x1);
    cx.fillStyle = 'rgba(95,61,196,0.25)';
    cx.fillRect(a, 0, b - a, rows.length * TROW);
  }

  // ---- links from findings, tables and the dump
  document.addEventListener('click', function (ev) {
    var a = ev.target.closest ? ev.target.closest('a[data-tid],a[data-fn]') : null;
    if (!a || a.classList.contains('tl-label')) return;
    if (a.hasAttribute('data-fn')) {
      ev.preventDefault();
      search.value = a.getAttribute('data-fn').replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      st.search = search.value; compileSearch(); st.focus = 0;
      drawFlame();
      $('flame').scrollIntoView({ block: 'start' });
      return;
    }
    var tid = +a.getAttribute('data-tid');
    var ix = threadIndex(tid);
    if (ix >= 0 && a.classList.contains('focus-thread')) {
      ev.preventDefault();
      st.thread = ix;
      refresh();
      $('timeline').scrollIntoView({ block: 'start' });
      return;
    }
    var d = $('thread-' + tid);
    if (d && d.tagName === 'DETAILS') d.open = true;
  });

  // ---- start
  var resizeTimer = 0;
  window.addEventListener('resize', function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { drawFlame(); drawTimeline(); }, 100);
  });
  if (!D.timed && tlBox) tlBox.style.display = 'none';
  if (!N) { var fb = $('flame'); if (fb) fb.style.display = 'none'; }
  if (location.hash.indexOf('#thread-') === 0) { var td = $(location.hash.slice(1)); if (td && td.tagName === 'DETAILS') td.open = true; }
  lap('setup');
  controls();
  if (N) drawFlame();
  lap('flame');
  drawTimeline();
  lap('timeline');
  document.documentElement.setAttribute('data-timing', JSON.stringify(timing));
  // when the page was ready, in ms since navigation began (the load
  // benchmark reads it)
  document.documentElement.setAttribute('data-ready-ms', String(Math.round(performance.now())));
  document.documentElement.setAttribute('data-ready', '1');
})();
