#!/usr/bin/env python3
"""An independent safetensors reader and writer in pure Python (struct + json; no numpy), the
reference the C++ safetensors I/O is checked against.

  safetensors_ref.py read FILE        prints {"name": {"dtype", "shape", "values"}, ...} as JSON
  safetensors_ref.py write FILE       writes a fixed set of F32/BF16/F16 tensors (see below)
"""
import json
import struct
import sys


def decode(dtype, raw):
    if dtype == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    if dtype == "F16":
        return list(struct.unpack("<%de" % (len(raw) // 2), raw))
    if dtype == "BF16":  # the upper half of a float32
        return [struct.unpack("<f", b"\x00\x00" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    raise SystemExit("unsupported dtype " + dtype)


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = {"dtype": e["dtype"], "shape": e["shape"], "values": decode(e["dtype"], data[b:end])}
    print(json.dumps(out))


def write(path):
    tensors = [
        ("a.f32", "F32", [2, 3], struct.pack("<6f", 1.5, -2.25, 3.0, 0.1, 1e-3, -7.0)),
        ("b.bf16", "BF16", [4], b"".join(struct.pack("<f", v)[2:] for v in (1.0, -0.5, 3.140625, 256.0))),
        ("c.f16", "F16", [1, 2, 2], struct.pack("<4e", 0.5, -1.25, 65504.0, 6.103515625e-05)),
    ]
    header, offset, blobs = {}, 0, []
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


if __name__ == "__main__":
    {"read": read, "write": write}[sys.argv[1]](sys.argv[2])
