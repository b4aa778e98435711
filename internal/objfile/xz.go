package objfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ulikunitz/xz"
)

// MiniDebugInfo (.gnu_debugdata) is an xz stream holding a small ELF file
// with the symbols .dynsym lacks. The xz decoder allocates whatever
// dictionary a block header asks for (up to 4 GiB) and inflates without
// limit, so the stream's index and block headers are checked first.
const (
	maxMiniDebugInfo = 64 << 20 // inflated bytes (distributions' are < 1 MiB)
	maxXZDict        = 64 << 20 // xz -9's dictionary
)

var xzMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0}

// inflateXZ checks and decompresses an xz file.
func inflateXZ(data []byte) ([]byte, error) {
	total, err := checkXZ(data)
	if err != nil {
		return nil, err
	}
	r, err := xz.ReaderConfig{DictCap: 1 << 16}.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	out := make([]byte, 0, total)
	buf := bytes.NewBuffer(out)
	n, err := io.Copy(buf, io.LimitReader(r, int64(total)+1))
	if err != nil {
		return nil, fmt.Errorf("xz: at inflated byte %d: %w", n, err)
	}
	if uint64(n) != total {
		return nil, fmt.Errorf("xz: inflated %d bytes, the index says %d", n, total)
	}
	return buf.Bytes(), nil
}

// checkXZ walks an xz file's streams from the end (footer, index, block
// headers) and returns the total inflated size, refusing one above
// maxMiniDebugInfo or a block whose LZMA2 dictionary is above maxXZDict.
func checkXZ(data []byte) (uint64, error) {
	var total uint64
	end := len(data)
	for end > 0 {
		for end >= 4 && bytes.Equal(data[end-4:end], []byte{0, 0, 0, 0}) {
			end -= 4 // stream padding
		}
		if end == 0 {
			break
		}
		start, size, err := checkXZStream(data, end)
		if err != nil {
			return 0, err
		}
		total += size
		if total > maxMiniDebugInfo {
			return 0, fmt.Errorf("xz: inflates to more than %d bytes", maxMiniDebugInfo)
		}
		end = start
	}
	if total == 0 {
		return 0, errors.New("xz: empty")
	}
	return total, nil
}

// checkXZStream checks the stream that ends at end and returns where it
// starts and how many bytes it inflates to.
func checkXZStream(data []byte, end int) (start int, size uint64, err error) {
	if end < 24 {
		return 0, 0, fmt.Errorf("xz: stream ending at %d is too short", end)
	}
	footer := data[end-12 : end]
	if footer[10] != 'Y' || footer[11] != 'Z' {
		return 0, 0, fmt.Errorf("xz: no stream footer at offset %d", end-12)
	}
	indexSize := (uint64(binary.LittleEndian.Uint32(footer[4:])) + 1) * 4
	if indexSize > uint64(end-12-12) {
		return 0, 0, fmt.Errorf("xz: index size %d at offset %d is larger than the stream", indexSize, end-8)
	}
	indexStart := end - 12 - int(indexSize)
	blocks, err := parseXZIndex(data[indexStart:end-12], indexStart)
	if err != nil {
		return 0, 0, err
	}
	var blocksSize uint64
	for _, b := range blocks {
		blocksSize += (b.unpadded + 3) &^ 3
		size += b.inflated
		if blocksSize > uint64(indexStart) || size > maxMiniDebugInfo {
			return 0, 0, fmt.Errorf("xz: index at offset %d describes more than the file holds", indexStart)
		}
	}
	if uint64(indexStart) < 12+blocksSize {
		return 0, 0, fmt.Errorf("xz: index at offset %d describes more than the file holds", indexStart)
	}
	start = indexStart - int(blocksSize) - 12
	if !bytes.Equal(data[start:start+6], xzMagic) {
		return 0, 0, fmt.Errorf("xz: no stream header at offset %d", start)
	}
	off := start + 12
	for _, b := range blocks {
		if err := checkXZBlockHeader(data[off:indexStart], off); err != nil {
			return 0, 0, err
		}
		off += int((b.unpadded + 3) &^ 3)
	}
	return start, size, nil
}

type xzBlock struct{ unpadded, inflated uint64 }

func parseXZIndex(b []byte, at int) ([]xzBlock, error) {
	if len(b) == 0 || b[0] != 0 {
		return nil, fmt.Errorf("xz: no index at offset %d", at)
	}
	p := 1
	n, err := xzVarint(b, &p, at)
	if err != nil {
		return nil, err
	}
	if n > uint64(len(b))/2 { // each record takes at least two bytes
		return nil, fmt.Errorf("xz: index at offset %d claims %d blocks", at, n)
	}
	blocks := make([]xzBlock, 0, n)
	for i := uint64(0); i < n; i++ {
		var blk xzBlock
		if blk.unpadded, err = xzVarint(b, &p, at); err != nil {
			return nil, err
		}
		if blk.inflated, err = xzVarint(b, &p, at); err != nil {
			return nil, err
		}
		blocks = append(blocks, blk)
	}
	return blocks, nil
}

func xzVarint(b []byte, p *int, at int) (uint64, error) {
	var v uint64
	for i := 0; i < 9; i++ {
		if *p >= len(b) {
			return 0, fmt.Errorf("xz: truncated number at offset %d", at+*p)
		}
		c := b[*p]
		*p++
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("xz: number too long at offset %d", at+*p)
}

// checkXZBlockHeader refuses a block whose LZMA2 filter asks for a
// dictionary above maxXZDict.
func checkXZBlockHeader(b []byte, at int) error {
	if len(b) < 2 || b[0] == 0 {
		return fmt.Errorf("xz: no block header at offset %d", at)
	}
	hsize := (int(b[0]) + 1) * 4
	if hsize > len(b) {
		return fmt.Errorf("xz: block header at offset %d runs past the blocks", at)
	}
	h := b[:hsize]
	flags := h[1]
	p := 2
	if flags&0x40 != 0 {
		if _, err := xzVarint(h, &p, at); err != nil {
			return err
		}
	}
	if flags&0x80 != 0 {
		if _, err := xzVarint(h, &p, at); err != nil {
			return err
		}
	}
	for i := 0; i <= int(flags&3); i++ {
		id, err := xzVarint(h, &p, at)
		if err != nil {
			return err
		}
		psize, err := xzVarint(h, &p, at)
		if err != nil {
			return err
		}
		if psize > uint64(len(h)-p) {
			return fmt.Errorf("xz: filter properties at offset %d run past the block header", at+p)
		}
		props := h[p : p+int(psize)]
		p += int(psize)
		if id == 0x21 { // LZMA2
			if len(props) != 1 || props[0] > 40 {
				return fmt.Errorf("xz: bad LZMA2 properties at offset %d", at+p-int(psize))
			}
			if d := lzma2DictSize(props[0]); d > maxXZDict {
				return fmt.Errorf("xz: block at offset %d wants a %d byte dictionary (limit %d)", at, d, maxXZDict)
			}
		}
	}
	return nil
}

func lzma2DictSize(b byte) uint64 {
	if b == 40 {
		return 0xffffffff
	}
	return uint64(2|b&1) << (b/2 + 11)
}
