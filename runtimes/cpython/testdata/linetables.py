# linetables.py prints, for every code object of some real sources, its
# line table as this CPython stores it and the line CPython's own
# PyCode_Addr2Line gives for each instruction's byte offset (-1: none),
# one JSON object a line, for TestLineTablesMatchCPython.
#
#   python3 linetables.py FILE...
import ctypes
import json
import sys

addr2line = ctypes.pythonapi.PyCode_Addr2Line
addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
addr2line.restype = ctypes.c_int


def table(code):
    if sys.version_info >= (3, 10):
        return code.co_linetable
    return code.co_lnotab


def codes(code):
    yield code
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            yield from codes(c)


for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        top = compile(f.read(), path, "exec")
    for c in codes(top):
        n = len(c.co_code)
        lines = [addr2line(c, off) for off in range(0, n, 2)]
        print(json.dumps({"name": c.co_name, "first": c.co_firstlineno,
                          "table": table(c).hex(), "lines": lines,
                          "before": addr2line(c, -1)}))
