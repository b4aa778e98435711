package cpython

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds on the strings read: a function's name and a file's path.
const (
	maxName = 512
	maxPath = 4096
)

// ErrNotAnObject is what a CorruptError wraps when memory that should
// hold an object of a type holds something else: the target changed it
// while it was read, or it is garbage.
var ErrNotAnObject = errors.New("not an object of the expected type")

// CorruptError says a structure read from the target does not hold what
// its type says it must.
type CorruptError struct {
	What   string // "code object", "str (co_name)"
	Addr   uint64
	Detail string // "ob_type 0x… is not PyCode_Type 0x…", "length -3"
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s at %#x: %s", e.What, e.Addr, e.Detail)
}

func (e *CorruptError) Unwrap() error { return ErrNotAnObject }

// typeAddrs are the type objects that identify what a pointer points to;
// zero when the image does not export the type (then its tp_name is
// checked instead, once per type pointer: checkedTypes).
type typeAddrs struct {
	code, unicode, bytes, frame uint64
}

// checkType says whether ob_type (the type pointer of an object at addr)
// is the type want (known address) or, when that address is not known,
// a type whose tp_name is name.
func (rt *Runtime) checkType(what string, addr, obType, want uint64, name string) error {
	if want != 0 {
		if obType != want {
			return &CorruptError{What: what, Addr: addr, Detail: fmt.Sprintf("ob_type %#x is not %s %#x", obType, name, want)}
		}
		return nil
	}
	if got, ok := rt.typeNames[obType]; ok {
		if got != name {
			return &CorruptError{What: what, Addr: addr, Detail: fmt.Sprintf("ob_type %#x is %q, not %q", obType, got, name)}
		}
		return nil
	}
	b, err := rt.r.structAt("type object", obType, offTypeName+8, 8, rt.typeBuf[:0])
	if err != nil {
		return err
	}
	tpName, err := rt.cString(u64(b, offTypeName), 64)
	if err != nil {
		return &CorruptError{What: what, Addr: addr, Detail: fmt.Sprintf("ob_type %#x has no readable tp_name", obType)}
	}
	if len(rt.typeNames) < 64 {
		rt.typeNames[obType] = tpName
	}
	if tpName != name {
		return &CorruptError{What: what, Addr: addr, Detail: fmt.Sprintf("ob_type %#x is %q, not %q", obType, tpName, name)}
	}
	return nil
}

// cString reads a NUL-terminated string of at most max bytes.
func (rt *Runtime) cString(addr uint64, max int) (string, error) {
	b := make([]byte, max)
	if err := rt.r.read(b, addr); err != nil {
		// The string may end before a page that is not mapped.
		n := int(pageSize - addr%pageSize)
		if n >= max || rt.r.read(b[:n], addr) != nil {
			return "", err
		}
		b = b[:n]
	}
	i := strings.IndexByte(string(b), 0)
	if i < 0 {
		return "", fmt.Errorf("no NUL within %d bytes", len(b))
	}
	return string(b[:i]), nil
}

// str reads the str object at addr, at most max characters (a longer
// one is cut and ends with "…"), as UTF-8.
func (rt *Runtime) str(what string, addr uint64, max int) (string, error) {
	l := rt.l
	hdr, err := rt.r.structAt(what, addr, l.UnicodeASCIISize, 8, rt.strBuf[:0])
	if err != nil {
		return "", err
	}
	if err := rt.checkType(what, addr, u64(hdr, offObType), rt.types.unicode, "str"); err != nil {
		return "", err
	}
	s, err := decodeStr(l, hdr, addr, max, rt.r.read, rt.r.spend)
	if err != nil {
		if _, ok := err.(*CorruptError); ok {
			return "", err
		}
		return "", &ReadError{What: what + "'s characters", Addr: addr, Err: err}
	}
	return s, nil
}

// decodeStr decodes a str object whose PyASCIIObject (from addr) is hdr,
// reading its characters (and a legacy string's data pointer) with read.
func decodeStr(l *Layout, hdr []byte, addr uint64, max int, read func([]byte, uint64) error, spend func(int) error) (string, error) {
	state := u32(hdr, l.UnicodeState)
	kind := int(state>>l.KindShift) & 7
	compact := state>>l.CompactBit&1 != 0
	ascii := state>>l.ASCIIBit&1 != 0
	if l.ReadyBit >= 0 && state>>l.ReadyBit&1 == 0 {
		return "", &CorruptError{What: "str", Addr: addr, Detail: "not ready (a legacy string with only wchar_t data)"}
	}
	if kind != 1 && kind != 2 && kind != 4 || ascii && kind != 1 {
		return "", &CorruptError{What: "str", Addr: addr, Detail: fmt.Sprintf("state %#x: kind %d", state, kind)}
	}
	length := int64(u64(hdr, l.UnicodeLength))
	if length < 0 || length > 1<<40 {
		return "", &CorruptError{What: "str", Addr: addr, Detail: fmt.Sprintf("length %d", length)}
	}
	n := int(min(length, int64(max)))
	var data uint64
	switch {
	case compact && ascii:
		data = addr + uint64(l.UnicodeASCIISize)
	case compact:
		data = addr + uint64(l.UnicodeCompactSize)
	default:
		var p [8]byte
		if err := read(p[:], addr+uint64(l.UnicodeData)); err != nil {
			return "", err
		}
		data = u64(p[:], 0)
	}
	if err := spend(n * kind); err != nil {
		return "", err
	}
	raw := make([]byte, n*kind)
	if n > 0 {
		if err := read(raw, data); err != nil {
			return "", err
		}
	}
	out := decodeChars(raw, kind, n)
	if int64(n) < length {
		out += "…"
	}
	return out, nil
}

// decodeChars turns n characters of kind bytes each (latin-1, UCS-2,
// UCS-4) into UTF-8; what is no character (a lone surrogate, past
// U+10FFFF) becomes U+FFFD.
func decodeChars(raw []byte, kind, n int) string {
	ascii := kind == 1
	for _, c := range raw {
		if c >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return string(raw)
	}
	b := make([]byte, 0, n*2)
	for i := 0; i < n; i++ {
		var r rune
		switch kind {
		case 1:
			r = rune(raw[i])
		case 2:
			r = rune(raw[2*i]) | rune(raw[2*i+1])<<8
		case 4:
			u := uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24
			if u > utf8.MaxRune {
				u = utf8.RuneError
			}
			r = rune(u)
		}
		if !utf8.ValidRune(r) {
			r = utf8.RuneError
		}
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}

// bytesObject reads the bytes object at addr, which must hold at most
// max bytes.
func (rt *Runtime) bytesObject(what string, addr uint64, max int) ([]byte, error) {
	hdr, err := rt.r.structAt(what, addr, offBytesVal, 8, rt.bytesBuf[:0])
	if err != nil {
		return nil, err
	}
	if err := rt.checkType(what, addr, u64(hdr, offObType), rt.types.bytes, "bytes"); err != nil {
		return nil, err
	}
	size := int64(u64(hdr, offObSize))
	if size < 0 || size > int64(max) {
		return nil, &CorruptError{What: what, Addr: addr, Detail: fmt.Sprintf("size %d (at most %d read)", size, max)}
	}
	if size > 0 {
		// The last byte first: a lying size over unmapped memory costs
		// no allocation.
		var last [1]byte
		if err := rt.r.read(last[:], addr+offBytesVal+uint64(size)-1); err != nil {
			return nil, &ReadError{What: what + "'s bytes", Addr: addr + offBytesVal, Err: err}
		}
	}
	if err := rt.r.spend(int(size)); err != nil {
		return nil, &ReadError{What: what + "'s bytes", Addr: addr + offBytesVal, Err: err}
	}
	b := make([]byte, size)
	if err := rt.r.read(b, addr+offBytesVal); err != nil {
		return nil, &ReadError{What: what + "'s bytes", Addr: addr + offBytesVal, Err: err}
	}
	return b, nil
}

// codeInfo is what is kept of one code object: its names, first line,
// line table and size, and the fields they were read from (key), which
// must still be there for the entry to be used again: a code object freed
// and another allocated at its address is read anew.
type codeInfo struct {
	key            codeKey
	function       string
	file           string
	table          []byte
	tableErr       error
	units          int64 // instructions, in code units (3.11+)
	firstTraceable int64 // _co_firsttraceable (3.11+)
	checked        time.Time
}

type codeKey struct {
	name, qualname, filename, linetable uint64
	firstLine                           int32
}

// maxCodes and maxCodeBytes bound the code objects remembered (and the
// bytes of their names and tables); past either the cache starts over.
const (
	maxCodes     = 16384
	maxCodeBytes = 64 << 20
)

// codeTrust is how long a sample's walk (FramesCached) uses a code object
// it checked without reading it again. A code object a live frame runs
// cannot be freed; one freed and replaced by another at its address in
// that time is named as the one before, unless the frame's instruction
// falls outside it.
const codeTrust = time.Second

// code reads (or finds again) the code object at addr; with trust, one
// checked within codeTrust is not read again.
func (rt *Runtime) code(addr uint64, trust bool) (*codeInfo, error) {
	if c, ok := rt.codes[addr]; ok && trust && rt.now().Sub(c.checked) < codeTrust {
		return c, nil
	}
	l := rt.l
	hdr, err := rt.r.structAt("code object", addr, l.CodeSize, 8, rt.codeBuf[:0])
	if err != nil {
		return nil, err
	}
	rt.codeBuf = hdr
	if err := rt.checkType("code object", addr, u64(hdr, offObType), rt.types.code, "code"); err != nil {
		return nil, err
	}
	key := codeKey{
		name: u64(hdr, l.CodeName), qualname: u64(hdr, l.CodeQualname), filename: u64(hdr, l.CodeFilename),
		linetable: u64(hdr, l.CodeLineTable), firstLine: int32(u32(hdr, l.CodeFirstLine)),
	}
	if c, ok := rt.codes[addr]; ok && c.key == key {
		c.checked = rt.now()
		return c, nil
	}
	c, err := rt.readCode(addr, key)
	if err != nil {
		return nil, err
	}
	if l.CodeAdaptive >= 0 {
		c.units = int64(u64(hdr, offObSize))
		c.firstTraceable = int64(int32(u32(hdr, l.CodeFirstTraceable)))
	}
	c.checked = rt.now()
	size := len(c.function) + len(c.file) + len(c.table) + 128
	if len(rt.codes) >= maxCodes || rt.codeBytes+size > maxCodeBytes {
		clear(rt.codes)
		rt.codeBytes = 0
	}
	rt.codes[addr] = c
	rt.codeBytes += size
	return c, nil
}

func (rt *Runtime) readCode(addr uint64, key codeKey) (*codeInfo, error) {
	c := &codeInfo{key: key}
	nameAt, what := key.qualname, "co_qualname"
	if rt.l.CodeQualname < 0 {
		nameAt, what = key.name, "co_name"
	}
	var err error
	if c.function, err = rt.str("code object's "+what, nameAt, maxName); err != nil {
		return nil, err
	}
	if c.file, err = rt.str("code object's co_filename", key.filename, maxPath); err != nil {
		return nil, err
	}
	// A line table that cannot be read costs the lines, not the names.
	c.table, c.tableErr = rt.bytesObject("code object's line table", key.linetable, maxLineTable)
	return c, nil
}
