"""A native-check probe that really crashes for llama.cpp's repacked layout (a null pointer read through
ctypes) and passes for the plain one: what a broken native build does, on demand."""

import ctypes
import json
import sys

if __name__ == "__main__":
    layout = sys.argv[sys.argv.index("--layout") + 1]
    if layout == "repack":
        ctypes.string_at(0)
    print(json.dumps({"ok": True, "reason": "plain layout agrees"}), flush=True)
