#!/usr/bin/env python3
"""An independent safetensors reader and writer in pure Python (struct + json; no numpy), the
reference the C++ safetensors I/O is checked against.

  safetensors_ref.py read FILE        prints {"name": {"dtype", "shape", "values"}, ...} as JSON
  safetensors_ref.py write FILE       writes a fixed set of F32/BF16/F16 tensors (see below)
  safetensors_ref.py write-fp8 FILE   writes block-scaled F8_E4M3 tensors with their weight_scale_inv
  safetensors_ref.py dequant FILE     prints {"name": [float64 values]} of every FP8 tensor times its
                                      128 x 128 block scale, computed here from the bits
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
    if dtype == "F8_E4M3":
        return [e4m3(b) for b in raw]
    if dtype == "I64":
        return list(struct.unpack("<%dq" % (len(raw) // 8), raw))
    raise SystemExit("unsupported dtype " + dtype)


def e4m3(b):
    """OCP E4M3 (fn): bias 7, no infinities, S.1111.111 is NaN."""
    sign = -1.0 if b & 0x80 else 1.0
    exp, mant = (b >> 3) & 0xF, b & 7
    if exp == 15 and mant == 7:
        return float("nan")
    if exp == 0:
        return sign * mant / 8.0 * 2.0 ** -6
    return sign * (1.0 + mant / 8.0) * 2.0 ** (exp - 7)


def tensors_of(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    return {k: (e["dtype"], e["shape"], data[e["data_offsets"][0]:e["data_offsets"][1]])
            for k, e in header.items() if k != "__metadata__"}


def dequant(path):
    t = tensors_of(path)
    out = {}
    for name, (dtype, shape, raw) in t.items():
        if dtype != "F8_E4M3":
            continue
        sdtype, sshape, sraw = t[name + "_scale_inv"]
        scale = decode(sdtype, sraw)
        rows, cols = shape[-2], shape[-1]
        srows, scols = sshape[-2], sshape[-1]
        vals = []
        for i, b in enumerate(raw):
            c, r, k = i % cols, (i // cols) % rows, i // (rows * cols)
            vals.append(e4m3(b) * scale[(k * srows + r // 128) * scols + c // 128])
        out[name] = vals
    print(json.dumps(out))


def write_fp8(path):
    """Two FP8 weights with partial edge blocks (F32 and BF16 scales) and a BF16 bystander. The
    codes walk through every finite E4M3 value, both signs, subnormals included."""
    def codes(n, seed):
        return bytes(((i * 37 + seed) % 256) if ((i * 37 + seed) % 128) != 127 else 0 for i in range(n))
    def f32(vals):
        return struct.pack("<%df" % len(vals), *vals)
    def bf16(vals):
        return b"".join(struct.pack("<f", v)[2:] for v in vals)
    tensors = [
        ("a.weight", "F8_E4M3", [200, 300], codes(200 * 300, 1)),
        ("a.weight_scale_inv", "F32", [2, 3], f32([0.5, 1.0 / 3.0, 2.0, 1e-3, 7.25, 0.0078125])),
        ("b.weight", "F8_E4M3", [2, 130, 129], codes(2 * 130 * 129, 5)),
        ("b.weight_scale_inv", "BF16", [2, 2, 2], bf16([1.0, 0.5, 0.25, 2.0, 4.0, 0.125, 3.0, 1.5])),
        ("c.weight", "BF16", [3], bf16([1.0, -2.0, 0.5])),
    ]
    header, offset, blobs = {}, 0, []
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


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
    {"read": read, "write": write, "write-fp8": write_fp8, "dequant": dequant}[sys.argv[1]](sys.argv[2])
