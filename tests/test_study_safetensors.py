"""The .safetensors reader against the reference (the ``safetensors`` package): a
differential fuzz test.  Generated headers - valid ones, each rule broken in turn, and random
mutations of valid files (byte flips, insertions, deletions, truncations) - are read by both;
fp8kit accepts a file if and only if the reference does (the one deliberate difference:
duplicate tensor names, which the reference silently collapses), and on accepted files every
tensor's bytes are identical.  Refusals are one line naming the file."""

import json
import struct
import tracemalloc

import numpy as np
import pytest

from fp8kit.study._safetensors import MAX_HEADER_SIZE, open_map, read_header, tensor_view
from fp8kit.study.io import StudyInputError

safetensors = pytest.importorskip("safetensors")

#: The reference's dtype codes (0.8) and bits per element, written out independently of
#: the module under test.
BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64,
}  # fmt: skip
NUMPY_LOADABLE = {"BOOL", "U8", "I8", "I16", "U16", "F16", "I32", "U32", "F32", "C64", "F64",
                  "I64", "U64"}  # fmt: skip


# ---------------------------------------------------------------- generating files
def dumps_pairs(pairs):
    """A JSON object from (key, value-as-JSON-text) pairs: duplicates and order as given."""
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}"


def random_shape(rng, bits):
    while True:
        shape = [int(d) for d in rng.integers(0, 5, rng.integers(0, 4))]
        if int(np.prod(shape)) * bits % 8 == 0:
            return shape


def valid_case(rng, n_max=4):
    """(header pairs as JSON text, data bytes) of a valid file with random dtypes, shapes,
    header order, entry spellings and metadata."""
    codes = list(BITS)
    entries, offset = [], 0
    for i in range(int(rng.integers(0, n_max + 1))):
        code = codes[rng.integers(len(codes))]
        shape = random_shape(rng, BITS[code])
        nbytes = int(np.prod(shape)) * BITS[code] // 8
        entries.append((f"t{i}.w", code, shape, offset, offset + nbytes))
        offset += nbytes
    pairs = []
    for name, code, shape, b, e in entries:
        style = rng.integers(8)
        dtype = json.dumps({code: None}) if style == 0 else json.dumps(code)
        if style == 1:  # serde also reads a struct from an array of its fields
            pairs.append((name, f"[{dtype},{json.dumps(shape)},[{b},{e}]]"))
            continue
        fields = [("dtype", dtype), ("shape", json.dumps(shape)), ("data_offsets", f"[{b},{e}]")]
        if style == 2:
            fields.append(("extra", '{"ignored": [1, 2.5, null, "x", -0]}'))
        rng.shuffle(fields)
        pairs.append((name, dumps_pairs(fields)))
    rng.shuffle(pairs)  # header order need not be data order
    meta = rng.integers(4)
    if meta:
        value = "null" if meta == 1 else json.dumps({"format": "pt", "k": "\u00e9\ud83d\ude00"})
        pairs.insert(int(rng.integers(len(pairs) + 1)), ("__metadata__", value))
    data = rng.integers(0, 256, offset, dtype=np.uint8).tobytes()
    return pairs, data


def file_bytes(header_text, data, pad=0):
    raw = header_text.encode("utf-8", "surrogatepass") + b" " * pad
    return struct.pack("<Q", len(raw)) + raw + data


def entry_of(pairs, i=0):
    """(index in pairs, name, parsed entry) of the i-th tensor entry (dict form)."""
    k = [j for j, (n, _) in enumerate(pairs) if n != "__metadata__"][i]
    name, text = pairs[k]
    value = json.loads(text)
    if isinstance(value, list):
        value = dict(zip(("dtype", "shape", "data_offsets"), value, strict=True))
    return k, name, value


def with_entry(pairs, i, **changes):
    k, name, value = entry_of(pairs, i)
    value.update(changes)
    out = list(pairs)
    out[k] = (name, json.dumps({f: v for f, v in value.items() if v is not ...}))
    return out


def broken_cases():
    """(id, file bytes) with one rule broken each (plus a few valid edge cases)."""
    rng = np.random.default_rng(7)
    while True:
        pairs, data = valid_case(rng, 3)
        n_tensors = len([n for n, _ in pairs if n != "__metadata__"])
        entries = [entry_of(pairs, i)[2] for i in range(n_tensors)]
        if n_tensors >= 2 and all(np.prod(e["shape"]) > 1 for e in entries):
            break
    k0, _, e0 = entry_of(pairs, 0)
    b, e = e0["data_offsets"]
    shape = e0["shape"]
    h = dumps_pairs(pairs)

    def put(text):  # the file with tensor 0's entry replaced by this JSON text
        new = [(n, text if i == k0 else t) for i, (n, t) in enumerate(pairs)]
        return file_bytes(dumps_pairs(new), data)

    def changed(**fields):  # the file with tensor 0's fields changed (... removes one)
        return file_bytes(dumps_pairs(with_entry(pairs, 0, **fields)), data)

    def fields(**texts):  # tensor 0's entry from JSON texts of its fields, in this order
        base = {"dtype": json.dumps(e0["dtype"]), "shape": json.dumps(shape),
                "data_offsets": json.dumps([b, e])}  # fmt: skip
        return dumps_pairs(list(base.items()) + list(texts.items()))

    def deep(n):
        return "[" * n + "]" * n

    yield "valid", file_bytes(h, data)
    yield "valid-padded", file_bytes(h, data, pad=7)
    yield "short-file", file_bytes(h, data)[:5]
    yield "length-past-end", struct.pack("<Q", len(h) + len(data) + 1) + h.encode() + data
    yield "length-over-limit", struct.pack("<Q", MAX_HEADER_SIZE + 1) + h.encode() + data
    yield "length-2**64-1", struct.pack("<Q", 2**64 - 1) + h.encode() + data
    yield "empty-header", file_bytes("", data)
    yield "not-object", file_bytes(json.dumps([1]), b"")
    yield "not-object-str", file_bytes('"x"', b"")
    yield "trailing-garbage", file_bytes(h + "x", data)
    yield "trailing-formfeed", file_bytes(h + "\f", data)
    yield "trailing-ws", file_bytes(h + " \t\r\n", data)
    yield "bom", file_bytes("\ufeff" + h, data)
    yield "not-utf8", struct.pack("<Q", len(h) + 1) + b"\xff" + h.encode() + data
    metas = [("list", "[1, 2]"), ("int", '{"a": 1}'), ("null-value", '{"a": null}'),
             ("dup-key", '{"a":"1","a":"2"}'), ("null", "null"), ("str", '"x"')]  # fmt: skip
    for label, meta in metas:
        rest = [(n, t) for n, t in pairs if n != "__metadata__"]
        yield f"meta-{label}", file_bytes(dumps_pairs([("__metadata__", meta), *rest]), data)
    yield "meta-dup", file_bytes(dumps_pairs([("__metadata__", "{}")] * 2), b"")
    yield "dup-tensor", file_bytes(dumps_pairs(pairs + [pairs[k0]]), data)
    yield "entry-null", put("null")
    yield "entry-seq-4", put(json.dumps([e0["dtype"], shape, [b, e], 1]))
    yield "entry-seq-2", put(json.dumps([e0["dtype"], shape]))
    for field in ("dtype", "shape", "data_offsets"):
        yield f"missing-{field}", changed(**{field: ...})
        yield f"dup-{field}", put(fields(**{field: json.dumps(e0[field])}))
    yield "extra-field", changed(extra=[1, {"a": None}])
    bad_dtypes = ["XX", "f32", "F8_E4M3FN", "", 1, None, ["F32"], {"F32": 1}, {"A": None}]
    for bad in bad_dtypes + [{"F32": None, "U8": None}]:
        yield f"dtype-{bad!r}", changed(dtype=bad)
    for label, text in [("float", "1.0"), ("neg", "-1"), ("negzero", "-0"), ("bool", "true"),
                        ("str", '"1"'), ("null", "null"), ("exp", "1e0"), ("2**64", str(2**64)),
                        ("nested", "[1]")]:  # fmt: skip
        dims = "[" + ",".join([text] + [str(d) for d in shape[1:]]) + "]"
        offs = f"[{text},{e}]" if b == 0 else f"[{b},{text}]"
        dt = ("dtype", json.dumps(e0["dtype"]))
        yield (
            f"shape-{label}",
            put(dumps_pairs([dt, ("shape", dims), ("data_offsets", f"[{b},{e}]")])),
        )
        yield (
            f"offsets-{label}",
            put(dumps_pairs([dt, ("shape", str(shape)), ("data_offsets", offs)])),
        )
    yield "shape-not-list", changed(shape=3)
    yield "offsets-3", changed(data_offsets=[b, e, e])
    yield "offsets-1", changed(data_offsets=[b])
    yield "offsets-reversed", changed(data_offsets=[e, b])
    yield "size-mismatch", changed(shape=shape + [2])
    yield "shape-overflow", changed(shape=[2**32, 2**32, 0])
    yield "shape-zero-first", changed(shape=[0, 2**32, 2**32], data_offsets=[b, b])
    yield "bits-overflow", changed(dtype="F64", shape=[2**61])
    yield "f4-odd", changed(dtype="F4", shape=[2 * (e - b) - 1])
    yield "f4-even", changed(dtype="F4", shape=[2 * (e - b)])
    yield "f6-odd", changed(dtype="F6_E2M3", shape=[e - b])
    yield (
        "gap",
        file_bytes(dumps_pairs([(n, t) for i, (n, t) in enumerate(pairs) if i != k0]), data),
    )
    yield "overlap-or-gap", changed(data_offsets=[b + 1, e + 1] if b == 0 else [b - 1, e - 1])
    yield "data-extra-byte", file_bytes(h, data + b"\0")
    yield "data-missing-byte", file_bytes(h, data[:-1])
    for label, junk in [("nan", "NaN"), ("inf", "Infinity"), ("1e999", "1e999"),
                        ("bigint", "9" * 30), ("surrogate", '"\\ud800"'),
                        ("pair", '"\\ud83d\\ude00"'), ("depth125", deep(125)),
                        ("depth126", deep(126)), ("depth1000", deep(1000)), ("ctrl", '"\u0001"'),
                        ("negzero", "-0"), ("dupkeys", '{"a":1,"a":2}')]:  # fmt: skip
        yield f"extra-{label}", put(fields(junk=junk))
    name_pairs = [("\ud800" if i == k0 else n, t) for i, (n, t) in enumerate(pairs)]
    yield "surrogate-name", file_bytes(dumps_pairs(name_pairs), data)


def mutations(rng, n):
    """(id, file bytes): random byte-level mutations of valid files."""
    alphabet = b'{}[]",:0123456789-.eE \\ntrufalsF8_UIB'
    for k in range(n):
        pairs, data = valid_case(rng)
        raw = bytearray(file_bytes(dumps_pairs(pairs), data))
        hlen = struct.unpack("<Q", raw[:8])[0]
        for _ in range(int(rng.integers(1, 4))):
            if len(raw) < 8:
                break
            op = rng.integers(6)
            pos = int(rng.integers(8, max(9, 8 + min(hlen, len(raw)))))
            if op == 0 and pos < len(raw):
                raw[pos] = int(rng.integers(256))
            elif op == 1 and pos < len(raw):
                raw[pos] = alphabet[rng.integers(len(alphabet))]
            elif op == 2 and pos < len(raw):
                del raw[pos]
                if rng.integers(2):
                    raw[:8] = struct.pack("<Q", max(0, hlen - 1))
            elif op == 3:
                raw.insert(pos, alphabet[rng.integers(len(alphabet))])
                if rng.integers(2):
                    raw[:8] = struct.pack("<Q", min(hlen + 1, 2**64 - 1))
            elif op == 4:
                del raw[int(rng.integers(0, len(raw) + 1)) :]
            else:
                raw[int(rng.integers(8))] ^= 1 << int(rng.integers(8))
            hlen = struct.unpack("<Q", raw[:8])[0] if len(raw) >= 8 else 0
        yield f"mutation-{k}", bytes(raw)


def value_mutations(rng, n):
    """(id, file bytes): valid files with one to three header values changed (a dimension,
    an offset, a dtype, offsets of two tensors swapped, the data one byte longer or shorter,
    a number written as a float, an extra key): many stay valid, many break one rule."""
    codes = list(BITS)
    for k in range(n):
        pairs, data = valid_case(rng)
        names = [n for n, _ in pairs if n != "__metadata__"]
        if not names:
            continue
        entries = {name: entry_of(pairs, i)[2] for i, name in enumerate(names)}
        texts = {}
        for _ in range(int(rng.integers(1, 4))):
            name = names[rng.integers(len(names))]
            ent = entries[name]
            op = rng.integers(8)
            if op == 0 and ent["shape"]:
                i = int(rng.integers(len(ent["shape"])))
                ent["shape"][i] = max(0, ent["shape"][i] + int(rng.choice([-1, 1, 2])))
            elif op == 1:
                ent["data_offsets"][int(rng.integers(2))] += int(rng.choice([-2, -1, 1, 2]))
            elif op == 2:
                ent["dtype"] = codes[rng.integers(len(codes))]
            elif op == 3:
                other = entries[names[rng.integers(len(names))]]
                ent["data_offsets"], other["data_offsets"] = (
                    other["data_offsets"],
                    ent["data_offsets"],
                )
            elif op == 4:
                data = data + b"\0" if rng.integers(2) else data[:-1]
            elif op == 5:  # an integer written as a float
                texts[name] = json.dumps(ent).replace("]", ".0]", 1)
            elif op == 6:
                ent["extra"] = {"x": [None, True, -0.0, "\u00e9"]}
            else:
                ent["shape"] = list(reversed(ent["shape"]))
        new = [
            (n, t) if n == "__metadata__" else (n, texts.get(n, json.dumps(entries[n])))
            for n, t in pairs
        ]
        yield f"value-mutation-{k}", file_bytes(dumps_pairs(new), data)


# ---------------------------------------------------------------- comparing
def duplicate_names(raw):
    """Whether the header (if it parses) has a tensor name twice: the reference keeps one."""
    try:
        n = struct.unpack("<Q", raw[:8])[0]
        pairs = json.loads(raw[8 : 8 + n].decode(), object_pairs_hook=lambda p: p)
    except Exception:
        return False
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) for p in pairs):
        return False
    names = [k for k, _ in pairs if k != "__metadata__"]
    return len(names) != len(set(names))


def reference(path):
    """None if the reference refuses the file, else {name: (dtype code, bytes or None)}."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            names = list(f.keys())
            got = {}
            for name in names:
                code = f.get_slice(name).get_dtype()
                got[name] = (code, f.get_tensor(name).tobytes() if code in NUMPY_LOADABLE else None)
    except Exception:  # the reference's SafetensorError, or an OverflowError
        return None
    # bfloat16 and float8 through torch; packed F4/F6 compared on the header verdict only
    torch_codes = {"BF16", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"}
    if any(code in torch_codes for code, _ in got.values()):
        torch = pytest.importorskip("torch")
        with safe_open(str(path), framework="pt") as f:
            for name, (code, _) in got.items():
                if code in torch_codes:
                    t = f.get_tensor(name).contiguous().reshape(-1).view(torch.uint8)
                    got[name] = (code, t.numpy().tobytes())
    return got


def check(tmp_path, case_id, raw):
    p = tmp_path / "case.safetensors"
    p.write_bytes(raw)
    ref = reference(p)
    try:
        header = read_header(p)
    except StudyInputError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith(f"{p}: "), (case_id, msg)
        expected_refusal = ref is None or duplicate_names(raw)
        assert expected_refusal, f"{case_id}: fp8kit refuses what the reference accepts: {msg}"
        return False
    assert ref is not None, f"{case_id}: fp8kit accepts what the reference refuses"
    assert not duplicate_names(raw), case_id
    buf = open_map(header)
    mine = {e.name: e for e in header.entries}
    assert set(mine) == set(ref), case_id
    for name, (code, raw_ref) in ref.items():
        assert mine[name].dtype == code, (case_id, name)
        if raw_ref is not None:
            assert tensor_view(header, buf, mine[name]).tobytes() == raw_ref, (case_id, name)
    return True


def test_rules_broken_one_at_a_time(tmp_path):
    verdicts = {case_id: check(tmp_path, case_id, raw) for case_id, raw in broken_cases()}
    accepted = {k for k, v in verdicts.items() if v}
    # the cases that must pass, so the generator cannot silently break every file
    assert accepted == {
        "valid", "valid-padded", "trailing-ws", "meta-dup-key", "meta-null", "extra-field",
        "f4-even", "extra-pair", "extra-depth125", "extra-negzero", "extra-dupkeys",
        "extra-bigint",
    }, sorted(accepted)  # fmt: skip
    assert len(verdicts) > 80


def test_duplicate_tensor_names_refused_unlike_the_reference(tmp_path):
    entry = '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'
    h = dumps_pairs([("a", entry), ("a", entry)])
    p = tmp_path / "dup.safetensors"
    p.write_bytes(file_bytes(h, b"x"))
    assert reference(p) is not None  # the reference keeps one of them
    with pytest.raises(StudyInputError, match=r"dup.safetensors: tensor 'a': the name appears tw"):
        read_header(p)


def test_valid_files_agree(tmp_path):
    rng = np.random.default_rng(11)
    for k in range(150):
        pairs, data = valid_case(rng)
        assert check(tmp_path, f"valid-{k}", file_bytes(dumps_pairs(pairs), data))


def test_random_mutations_agree(tmp_path):
    rng = np.random.default_rng(12)
    verdicts = [check(tmp_path, case_id, raw) for case_id, raw in mutations(rng, 1000)]
    assert 0 < sum(verdicts) < len(verdicts)  # both verdicts occur


def test_value_mutations_agree(tmp_path):
    rng = np.random.default_rng(14)
    verdicts = [check(tmp_path, case_id, raw) for case_id, raw in value_mutations(rng, 400)]
    assert 0.1 < sum(verdicts) / len(verdicts) < 0.9  # both verdicts are common


@pytest.mark.slow
def test_random_mutations_agree_many(tmp_path):
    rng = np.random.default_rng(13)
    verdicts = [check(tmp_path, case_id, raw) for case_id, raw in mutations(rng, 30000)]
    assert 0 < sum(verdicts) < len(verdicts)
    verdicts = [check(tmp_path, case_id, raw) for case_id, raw in value_mutations(rng, 20000)]
    assert 0 < sum(verdicts) < len(verdicts)


def test_nothing_allocated_from_untrusted_sizes(tmp_path):
    """A header that claims a terabyte is refused without allocating it."""
    h = json.dumps({"w": {"dtype": "F32", "shape": [2**38], "data_offsets": [0, 2**40]}})
    p = tmp_path / "liar.safetensors"
    p.write_bytes(file_bytes(h, b"\0" * 16))
    q = tmp_path / "liar2.safetensors"
    q.write_bytes(struct.pack("<Q", 2**62) + b"{}")
    tracemalloc.start()
    try:
        for path in (p, q):
            with pytest.raises(StudyInputError, match=r"runs? past the end of the file|exceeds"):
                read_header(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_cli_refusals_are_one_line(tmp_path, capsys):
    from fp8kit.cli import main

    for case_id, raw in broken_cases():
        p = tmp_path / "c.safetensors"
        p.write_bytes(raw)
        if reference(p) is not None and not duplicate_names(raw):
            continue
        code = main(["study", str(p), "--formats", "float8_e5m2", "--scaling", "none"])
        out, err = capsys.readouterr()
        assert code == 1 and not out, case_id
        assert len(err.splitlines()) == 1 and err.startswith(f"fp8kit study: error: {p}: "), (
            case_id,
            err,
        )


@pytest.mark.parametrize(
    "header, data, message",
    [
        pytest.param('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0.0,8.5]}}', 8,
                     "tensor 'a': data_offsets must be integers; got a float (0.0)", id="float"),
        pytest.param('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                     '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', 12,
                     "tensor 'b': data_offsets [4, 12] overlaps the tensor before it (the "
                     "tensors must tile the data buffer in order; this one should begin at "
                     "byte 8)", id="overlap"),
        pytest.param('{"__metadata__":[1,2],"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
                     8, "'__metadata__' must be a map of strings; got [1, 2]", id="metadata"),
    ],
)  # fmt: skip
def test_issue_21_files(tmp_path, capsys, header, data, message):
    """The three files of issue 21 that fp8kit used to accept: refused as the reference does."""
    from fp8kit.cli import main

    p = tmp_path / "bad.safetensors"
    p.write_bytes(file_bytes(header, bytes(data)))
    assert reference(p) is None
    assert main(["study", str(p)]) == 1
    out, err = capsys.readouterr()
    assert not out and err == f"fp8kit study: error: {p}: {message}\n"


@pytest.mark.slow
def test_header_length_limit(tmp_path):
    """The reference reads headers of up to 100,000,000 bytes: so does fp8kit."""
    for n, ok in ((MAX_HEADER_SIZE, True), (MAX_HEADER_SIZE + 1, False)):
        p = tmp_path / f"h{n}.safetensors"
        p.write_bytes(struct.pack("<Q", n) + b"{}" + b" " * (n - 2))
        assert check(tmp_path, f"header-{n}", p.read_bytes()) is ok
        p.unlink()
