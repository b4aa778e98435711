package hotspot

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
)

// Java objects are read as HotSpot lays them out: a mark word, a class
// pointer (narrow under -XX:+UseCompressedClassPointers), then fields at
// the offsets the class's FieldInfo records. Nothing about a class's
// fields is assumed: each is looked up by name in the class and its
// superclasses, as the Serviceability Agent does.

// accStatic is the class file's ACC_STATIC (JVMS §4.5).
const accStatic = 0x0008

// maxSupers bounds a superclass chain (java.lang classes are a few
// levels deep; a cycle in garbage would not end).
const maxSupers = 64

// maxStringChars bounds a Java string read (a thread's name, a class's).
const maxStringChars = 4096

// ErrNoField is wrapped when a class and its superclasses lack a field.
var ErrNoField = errors.New("no such field")

// decodeOop turns a narrow oop into an address.
func (vm *VM) decodeOop(n uint32) uint64 {
	if n == 0 {
		return 0
	}
	return vm.oopBase + uint64(n)<<vm.oopShift
}

// oopField reads the reference field at off of the object at obj.
func (vm *VM) oopField(obj, off uint64, what string) (uint64, error) {
	if vm.narrowOops {
		n, err := vm.r.U32(obj+off, what)
		return vm.decodeOop(n), err
	}
	return vm.r.U64(obj+off, what)
}

// klassOf reads the class pointer of the object at obj.
func (vm *VM) klassOf(obj uint64) (uint64, error) {
	if vm.narrowKlass {
		n, err := vm.r.U32(obj+vm.o.klassField, "oopDesc::_metadata._compressed_klass")
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, &MemoryError{Addr: obj + vm.o.klassField, Len: 4, What: "an object's class", Err: ErrNull}
		}
		return vm.klassBase + uint64(n)<<vm.klassShift, nil
	}
	k, err := vm.r.U64(obj+vm.o.klassField, "oopDesc::_metadata._klass")
	if err == nil && k == 0 {
		err = &MemoryError{Addr: obj + vm.o.klassField, Len: 8, What: "an object's class", Err: ErrNull}
	}
	return k, err
}

// symbol reads a HotSpot Symbol (a class, method or field name, a
// signature: modified UTF-8, which is ASCII for the names readers show).
func (vm *VM) symbol(addr uint64) (string, error) {
	n, err := vm.r.U16(addr+vm.o.symLength, "Symbol::_length")
	if err != nil {
		return "", err
	}
	b, err := vm.r.Bytes(addr+vm.o.symBody, int(n), "Symbol::_body")
	return string(b), err
}

// className reads a class's name in the JVM's internal form
// ("java/lang/Thread", "Stall$Body").
func (vm *VM) className(klass uint64) (string, error) {
	s, err := vm.r.U64(klass+vm.o.klassName, "Klass::_name")
	if err != nil {
		return "", err
	}
	return vm.symbol(s)
}

// cpSymbol reads the Symbol at index i of a constant pool.
func (vm *VM) cpSymbol(cp uint64, i uint16) (string, error) {
	n, err := vm.r.U32(cp+vm.o.cpLength, "ConstantPool::_length")
	if err != nil {
		return "", err
	}
	if uint32(i) >= n || n > 1<<16 {
		return "", fmt.Errorf("constant pool %#x: index %d outside its %d entries", cp, i, n)
	}
	s, err := vm.r.U64(cp+vm.o.cpSize+uint64(i)*8, "constant pool entry")
	if err != nil {
		return "", err
	}
	return vm.symbol(s)
}

// fieldOffset finds the instance field name in the class klass or its
// superclasses and returns its offset in an object.
func (vm *VM) fieldOffset(klass uint64, name string) (uint64, error) {
	k := klass
	for range maxSupers {
		if k == 0 {
			break
		}
		fs, err := vm.classFields(k)
		if err != nil {
			return 0, err
		}
		if off, ok := fs[name]; ok {
			return off, nil
		}
		if k, err = vm.r.U64(k+vm.o.klassSuper, "Klass::_super"); err != nil {
			return 0, err
		}
	}
	cn, _ := vm.className(klass)
	return 0, fmt.Errorf("field %s of class %s: %w", name, cn, ErrNoField)
}

// maxFields bounds the fields of one class (the class file format allows
// 65,535).
const maxFields = 1 << 16

// classFields reads the instance fields a class declares (not its
// superclasses'), once per VM.
func (vm *VM) classFields(klass uint64) (map[string]uint64, error) {
	if fs, ok := vm.fields[klass]; ok {
		return fs, nil
	}
	o := &vm.o
	arr, err := vm.r.U64(klass+o.ikFields, "InstanceKlass::_fields")
	if err != nil {
		return nil, err
	}
	count, err := vm.r.U16(klass+o.ikFieldsCount, "InstanceKlass::_java_fields_count")
	if err != nil {
		return nil, err
	}
	cp, err := vm.r.U64(klass+o.ikConstants, "InstanceKlass::_constants")
	if err != nil {
		return nil, err
	}
	length, err := vm.r.U32(arr+o.arrayU2Length, "InstanceKlass::_fields length")
	if err != nil {
		return nil, err
	}
	slots := uint64(o.fieldSlots)
	if uint64(count)*slots > uint64(length) || length > maxFields*16 {
		return nil, fmt.Errorf("class %#x: %d fields of %d slots do not fit its field array of %d", klass, count, slots, length)
	}
	fs := map[string]uint64{}
	for i := range uint64(count) {
		b, err := vm.r.Bytes(arr+o.arrayU2Data+i*slots*2, int(slots*2), "FieldInfo")
		if err != nil {
			return nil, err
		}
		u2 := func(slot int64) uint16 { return uint16(b[slot*2]) | uint16(b[slot*2+1])<<8 }
		access := u2(o.fieldAccess)
		if access&accStatic != 0 || int64(access)&vm.fieldInternal() != 0 {
			continue
		}
		low := u2(o.fieldLow)
		if int64(low)&(1<<o.tagSize-1) != o.tagOffset {
			continue // not laid out yet
		}
		name, err := vm.cpSymbol(cp, u2(o.fieldName))
		if err != nil {
			return nil, err
		}
		fs[name] = (uint64(u2(o.fieldHigh))<<16 | uint64(low)) >> o.tagSize
	}
	vm.fields[klass] = fs
	return fs, nil
}

// fieldInternal is JVM_ACC_FIELD_INTERNAL: a field the VM injected, named
// by a vmSymbols index rather than the constant pool.
func (vm *VM) fieldInternal() int64 {
	if v, ok := vm.l.Ints["JVM_ACC_FIELD_INTERNAL"]; ok {
		return v
	}
	return 0x400
}

// objFieldOffset is the offset of the named field in the object at obj,
// from its class's field table.
func (vm *VM) objFieldOffset(obj uint64, name string) (uint64, error) {
	k, err := vm.klassOf(obj)
	if err != nil {
		return 0, err
	}
	off, err := vm.fieldOffset(k, name)
	if err != nil {
		return 0, err
	}
	return off, nil
}

// objectField reads the named reference field of the object at obj.
func (vm *VM) objectField(obj uint64, name string) (uint64, error) {
	off, err := vm.objFieldOffset(obj, name)
	if err != nil {
		return 0, err
	}
	return vm.oopField(obj, off, "field "+name)
}

// intField reads the named int field of the object at obj.
func (vm *VM) intField(obj uint64, name string) (int32, error) {
	off, err := vm.objFieldOffset(obj, name)
	if err != nil {
		return 0, err
	}
	v, err := vm.r.U32(obj+off, "field "+name)
	return int32(v), err
}

// longField reads the named long field of the object at obj.
func (vm *VM) longField(obj uint64, name string) (int64, error) {
	off, err := vm.objFieldOffset(obj, name)
	if err != nil {
		return 0, err
	}
	v, err := vm.r.U64(obj+off, "field "+name)
	return int64(v), err
}

// byteField reads the named byte or boolean field of the object at obj.
func (vm *VM) byteField(obj uint64, name string) (uint8, error) {
	off, err := vm.objFieldOffset(obj, name)
	if err != nil {
		return 0, err
	}
	return vm.r.U8(obj+off, "field "+name)
}

// javaString reads a java.lang.String: its value array, Latin-1 or UTF-16
// as its coder says (compact strings, JDK 9 and later).
func (vm *VM) javaString(obj uint64) (string, error) {
	if obj == 0 {
		return "", nil
	}
	value, err := vm.objectField(obj, "value")
	if err != nil {
		return "", err
	}
	coder, err := vm.byteField(obj, "coder")
	if err != nil {
		return "", err
	}
	b, err := vm.byteArray(value, maxStringChars*2)
	if err != nil {
		return "", err
	}
	if coder == 0 {
		var sb strings.Builder
		for _, c := range b {
			sb.WriteRune(rune(c))
		}
		return sb.String(), nil
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
	}
	return string(utf16.Decode(u)), nil
}

// byteArray reads a byte[]'s contents, at most max bytes of it.
func (vm *VM) byteArray(obj uint64, max int) ([]byte, error) {
	k, err := vm.klassOf(obj)
	if err != nil {
		return nil, err
	}
	lh, err := vm.r.U32(k+vm.o.klassLayout, "Klass::_layout_helper")
	if err != nil {
		return nil, err
	}
	// An array klass's layout helper is negative; its header size in
	// bytes is bits 16 to 23.
	if int32(lh) >= 0 {
		return nil, fmt.Errorf("object %#x is not an array (layout helper %#x)", obj, lh)
	}
	header := uint64(lh>>16) & 0xff
	n, err := vm.r.U32(obj+vm.arrayLength, "array length")
	if err != nil {
		return nil, err
	}
	if int32(n) < 0 {
		return nil, fmt.Errorf("array %#x: length %d", obj, int32(n))
	}
	return vm.r.Bytes(obj+header, min(int(n), max), "array contents")
}
