package v8

import (
	"encoding/binary"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// maxStringLength is V8's String::kMaxLength on 64-bit builds (2^29 - 24
// characters); a longer length is garbage.
const maxStringLength = 1<<29 - 24

// maxStringDepth bounds the nesting of cons, thin and sliced strings
// followed: a function or script name is one or two levels deep, a
// string built by concatenation a few more; a cycle is garbage.
const maxStringDepth = 32

// maxNameBytes bounds a name read for a frame (a function's, a
// script's): longer ones are cut there.
const maxNameBytes = 1024

// stringKind is a string instance type's representation.
func (l *Layout) stringKind(t uint16) uint16 { return t & l.strRepMask }

func (l *Layout) oneByte(t uint16) bool { return t&l.strEncodingMask == l.strOneByte }

// uncachedExternal is V8's kUncachedExternalStringMask: an external
// string without the cached pointer to its characters.
const uncachedExternal = 0x10

// chars visits the characters [start, start+n) of the string v points to,
// a chunk at a time: one byte each (Latin-1) when wide is false, two
// (UTF-16, little-endian) when true. It follows cons, thin and sliced
// strings and reads sequential and external ones.
func (h *heap) chars(v uint64, start, n int, depth int, fn func(b []byte, wide bool) error) error {
	if depth > maxStringDepth {
		return &ReadError{What: "string", Addr: v, Err: fmt.Errorf("nested more than %d deep: %w", maxStringDepth, ErrBudget)}
	}
	obj, t, err := h.typeOf("string", v)
	if err != nil {
		return err
	}
	if t >= h.l.firstNonString {
		return &TypeError{What: "string", Addr: v, Type: t}
	}
	length, err := h.i32("string length", obj+uint64(h.l.offStrLength))
	if err != nil {
		return err
	}
	if length < 0 || length > maxStringLength {
		return &ReadError{What: "string", Addr: v, Err: fmt.Errorf("length %d", length)}
	}
	if start < 0 || start > int(length) {
		return &ReadError{What: "string", Addr: v, Err: fmt.Errorf("slice at %d of %d characters", start, length)}
	}
	n = min(n, int(length)-start)
	if n <= 0 {
		return nil
	}
	switch h.l.stringKind(t) {
	case h.l.strSeq:
		return h.flat("string characters", obj+uint64(h.l.offSeqChars), start, n, !h.l.oneByte(t), fn)
	case h.l.strExternal:
		if t&uncachedExternal != 0 {
			return &ReadError{What: "external string", Addr: v, Err: fmt.Errorf("uncached (its characters are behind the embedder's resource)")}
		}
		// The cached pointer to the characters follows the resource.
		data, err := h.word("external string data", obj+uint64(h.l.offExternalResource)+8)
		if err != nil {
			return err
		}
		return h.flat("external string characters", data, start, n, !h.l.oneByte(t), fn)
	case h.l.strCons:
		first, err := h.field("cons string", obj, h.l.offConsFirst)
		if err != nil {
			return err
		}
		firstObj, _, err := h.typeOf("string", first)
		if err != nil {
			return err
		}
		firstLen, err := h.i32("string length", firstObj+uint64(h.l.offStrLength))
		if err != nil {
			return err
		}
		if firstLen < 0 || firstLen > length {
			return &ReadError{What: "cons string", Addr: v, Err: fmt.Errorf("first part of %d characters in %d", firstLen, length)}
		}
		if start < int(firstLen) {
			take := min(n, int(firstLen)-start)
			if err := h.chars(first, start, take, depth+1, fn); err != nil {
				return err
			}
			start, n = int(firstLen), n-take
			if n == 0 {
				return nil
			}
		}
		second, err := h.field("cons string", obj, h.l.offConsSecond)
		if err != nil {
			return err
		}
		return h.chars(second, start-int(firstLen), n, depth+1, fn)
	case h.l.strThin:
		actual, err := h.field("thin string", obj, h.l.offThinActual)
		if err != nil {
			return err
		}
		return h.chars(actual, start, n, depth+1, fn)
	case h.l.strSliced:
		parent, err := h.field("sliced string", obj, h.l.offSlicedParent)
		if err != nil {
			return err
		}
		off, err := h.field("sliced string", obj, h.l.offSlicedOffset)
		if err != nil {
			return err
		}
		if !h.l.isSmi(off) || h.l.smi(off) < 0 || h.l.smi(off) > maxStringLength {
			return &ReadError{What: "sliced string", Addr: v, Err: fmt.Errorf("offset %#x", off)}
		}
		return h.chars(parent, int(h.l.smi(off))+start, n, depth+1, fn)
	}
	return &TypeError{What: "string", Addr: v, Type: t}
}

// flat visits n characters from start of a flat string's characters at addr.
func (h *heap) flat(what string, addr uint64, start, n int, wide bool, fn func(b []byte, wide bool) error) error {
	size := 1
	if wide {
		size = 2
	}
	buf := make([]byte, min(n*size, chunk))
	at := addr + uint64(start*size)
	for left := n * size; left > 0; {
		b := buf[:min(left, len(buf))]
		if err := h.read(what, b, at); err != nil {
			return err
		}
		if err := fn(b, wide); err != nil {
			return err
		}
		at += uint64(len(b))
		left -= len(b)
	}
	return nil
}

// str reads the string v points to as UTF-8, at most max bytes of it.
func (h *heap) str(v uint64, max int) (string, error) {
	var out []byte
	full := errStop
	err := h.chars(v, 0, max, 0, func(b []byte, wide bool) error {
		if !wide {
			for _, c := range b {
				out = utf8.AppendRune(out, rune(c))
			}
		} else {
			u := make([]uint16, len(b)/2)
			for i := range u {
				u[i] = binary.LittleEndian.Uint16(b[2*i:])
			}
			for _, r := range utf16.Decode(u) {
				out = utf8.AppendRune(out, r)
			}
		}
		if len(out) >= max {
			return full
		}
		return nil
	})
	if err != nil && err != full {
		return "", err
	}
	if len(out) > max {
		out = out[:max]
		for len(out) > 0 && !utf8.Valid(out) {
			out = out[:len(out)-1]
		}
	}
	return string(out), nil
}

// errStop ends a visit of characters early, as asked.
var errStop = fmt.Errorf("enough")
