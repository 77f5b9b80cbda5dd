"""ibcm.raw against the C compiler: every size, alignment, member offset,
bitfield position, constant and function prototype, plus completeness
against the headers and the library's export map."""

import ctypes
import re
import subprocess

import pytest

from conftest import INCLUDE, REPO, compile_c

from ibcm import raw

HEADERS = ["rdma/ib_cm.h", "rdma/ib_verbs.h", "rdma/ib_sa.h", "rdma/rdma_cm.h", "ibcm.h"]


def ckind(cls):
    return "union" if issubclass(cls, ctypes.Union) else "struct"


def bitfield_fields(cls):
    return [(f[0], f[2]) for f in cls._fields_ if len(f) == 3]


def members(cls, prefix="", base=0):
    """(C member path, offset, size) of every non-bitfield member; members
    of unnamed types (Python name starting with "_") are flattened as C
    spells them: a.b for named members, b for anonymous ones."""
    anon = getattr(cls, "_anonymous_", ())
    for f in cls._fields_:
        if len(f) == 3:
            continue
        name, typ = f[0], f[1]
        desc = getattr(cls, name)
        off = base + desc.offset
        if name in anon:
            yield from members(typ, prefix, off)
            continue
        path = prefix + name
        yield path, off, ctypes.sizeof(typ)
        if isinstance(typ, type) and issubclass(typ, (ctypes.Structure, ctypes.Union)) and typ.__name__.startswith("_"):
            yield from members(typ, path + ".", off)


def py_bits(cls, name, width):
    v = cls()
    setattr(v, name, (1 << width) - 1)
    data = bytes(v)
    on = [i for i in range(len(data) * 8) if data[i // 8] >> (i % 8) & 1]
    return on[0], len(on)


C_PRELUDE = r"""
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <rdma/ib_cm.h>
#include <ibcm.h>

/* first set bit (counting from bit 0 of byte 0, LSB first) and number of
 * set bits, after a bitfield was set to all ones in a zeroed object */
static void bits(const char *t, const char *m, const unsigned char *p, size_t n)
{
	size_t i, first = 0, count = 0;
	for (i = 0; i < n * 8; i++)
		if (p[i / 8] >> (i % 8) & 1) {
			if (!count)
				first = i;
			count++;
		}
	printf("B %s %s %zu %zu\n", t, m, first, count);
}
static unsigned int ones = ~0u;
"""


def c_program():
    out = [C_PRELUDE]
    # Prototypes: gcc must consider each one identical to the header's.
    for name, (proto, _res, _args) in raw.FUNCTIONS.items():
        ret, params = proto[: proto.index(name)], proto[proto.index("(") :]
        out.append(
            f"_Static_assert(__builtin_types_compatible_p(__typeof__({name}), {ret.strip()} {params}), "
            f'"prototype of {name}");'
        )
    out.append("int main(void)\n{")
    for cls in raw.STRUCTS:
        t = f"{ckind(cls)} {cls.__name__}"
        out.append(f'\tprintf("T {cls.__name__} %zu %zu\\n", sizeof({t}), (size_t)_Alignof({t}));')
        for path, _o, _s in members(cls):
            out.append(
                f'\tprintf("M {cls.__name__} {path} %zu %zu\\n", offsetof({t}, {path}), '
                f"sizeof((({t} *)0)->{path}));"
            )
        for name, _w in bitfield_fields(cls):
            out.append(
                f"\t{{ {t} v; memset(&v, 0, sizeof(v)); v.{name} = ones; "
                f'bits("{cls.__name__}", "{name}", (const unsigned char *)&v, sizeof(v)); }}'
            )
    consts = {}
    for tag, mem in raw.ENUMS.items():
        consts.update(mem)
    consts.update(raw.MACROS)
    for name in consts:
        out.append(f'\tprintf("K {name} %llu\\n", (unsigned long long)({name}));')
    ctypes_seen = set()
    for name, (proto, _r, _a) in raw.FUNCTIONS.items():
        _n, res, args = raw.parse_prototype(proto)
        ret_c = proto[: proto.index(name)].strip()
        for cname in [ret_c] + [a[1] for a in args]:
            if cname != "void" and cname not in ctypes_seen:
                ctypes_seen.add(cname)
                out.append(f'\tprintf("P {cname}\\t%zu\\n", sizeof({cname}));')
    out.append("\treturn 0;\n}\n")
    return "\n".join(out)


@pytest.fixture(scope="module")
def c_facts(tmp_path_factory):
    exe = compile_c(c_program(), tmp_path_factory.mktemp("abi") / "abi_facts")
    text = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    facts = {"T": {}, "M": {}, "B": {}, "K": {}, "P": {}}
    for line in text.splitlines():
        kind, rest = line.split(" ", 1)
        if kind == "P":
            cname, size = rest.split("\t")
            facts["P"][cname] = int(size)
            continue
        parts = rest.split()
        if kind == "T":
            facts["T"][parts[0]] = (int(parts[1]), int(parts[2]))
        elif kind in "MB":
            facts[kind][(parts[0], parts[1])] = (int(parts[2]), int(parts[3]))
        elif kind == "K":
            facts["K"][parts[0]] = int(parts[1])
    return facts


def test_sizes_and_alignment(c_facts):
    assert set(c_facts["T"]) == {c.__name__ for c in raw.STRUCTS}
    for cls in raw.STRUCTS:
        assert (ctypes.sizeof(cls), ctypes.alignment(cls)) == c_facts["T"][cls.__name__], cls.__name__


def test_member_offsets(c_facts):
    n = 0
    for cls in raw.STRUCTS:
        for path, off, size in members(cls):
            assert c_facts["M"][(cls.__name__, path)] == (off, size), f"{cls.__name__}.{path}"
            n += 1
    assert n == len(c_facts["M"]) and n > 200


def test_bitfield_positions(c_facts):
    checked = 0
    for cls in raw.STRUCTS:
        for name, width in bitfield_fields(cls):
            assert py_bits(cls, name, width) == c_facts["B"][(cls.__name__, name)], f"{cls.__name__}.{name}"
            checked += 1
    assert checked == 11
    # The positions themselves (bit numbers from the start of the struct).
    assert c_facts["B"][("ib_cm_req_event_param", "local_cm_response_timeout")] == (66 * 8, 5)
    assert c_facts["B"][("ib_cm_req_event_param", "rnr_retry_count")] == (68 * 8, 3)
    assert c_facts["B"][("ib_cm_rep_event_param", "srq")] == (22 * 8 + 11, 1)


def test_bitfields_roundtrip_independently():
    p = raw.ib_cm_req_event_param()
    vals = dict(local_cm_response_timeout=21, flow_control=1, remote_cm_response_timeout=13,
                retry_count=6, rnr_retry_count=5, srq=1)
    for k, v in vals.items():
        setattr(p, k, v)
    p.initiator_depth, p.responder_resources = 0xAB, 0xCD
    p.ece.vendor_id = 0x12345678
    for k, v in vals.items():
        assert getattr(p, k) == v
    assert (p.initiator_depth, p.responder_resources, p.ece.vendor_id) == (0xAB, 0xCD, 0x12345678)


def test_constants(c_facts):
    consts = {}
    for mem in raw.ENUMS.values():
        consts.update(mem)
    consts.update(raw.MACROS)
    for name, value in consts.items():
        assert value & (2**64 - 1) == c_facts["K"][name], name
        assert getattr(raw, name) == value


def test_prototype_types(c_facts):
    """Each C type used in a prototype has the size of its ctypes mirror
    (the prototypes themselves were checked by _Static_assert at compile
    time)."""
    assert c_facts["P"]
    for cname, size in c_facts["P"].items():
        assert ctypes.sizeof(raw.ctype_of(cname)) == size, cname


def _header_text():
    text = ""
    for h in HEADERS:
        text += (INCLUDE / h).read_text()
    # drop comments
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def test_every_header_type_enum_and_macro_is_mirrored():
    text = _header_text()
    tags = set(re.findall(r"^\s*(?:struct|union)\s+(\w+)\s*\{", text, flags=re.M))
    assert tags - set(raw.C_TYPES) == set()
    for tag, body in re.findall(r"enum\s*(\w*)\s*\{(.*?)\}", text, flags=re.S):
        names = re.findall(r"^\s*([A-Z][A-Z0-9_]+)\s*(?:=|,|$)", body, flags=re.M)
        assert names, tag
        for n in names:
            assert hasattr(raw, n), f"enum {tag or '(anonymous)'}: {n}"
        if tag:
            assert set(names) == set(raw.ENUMS[tag]), tag
    # object-like macros with a value (function-like ones have no space
    # before their "("), except include-guard flags and attributes
    for name, value in re.findall(r"^#define\s+([A-Z][A-Z0-9_]+)\s+(\S.*)$", text, flags=re.M):
        if name.endswith("_H") or value.startswith("__attribute__"):
            continue
        assert name in raw.MACROS, name


def test_functions_match_export_map():
    mapfile = REPO / "ibcm.map"
    if not mapfile.exists():
        pytest.skip("no ibcm.map in this tree")
    exported = set(re.findall(r"^\s+(ib\w+);", mapfile.read_text(), flags=re.M))
    assert exported == set(raw.FUNCTIONS)


def test_functions_have_argtypes_and_restype():
    raw.load_library()
    assert not raw.MISSING, f"the library lacks {sorted(raw.MISSING)}"
    for name, (proto, res, args) in raw.FUNCTIONS.items():
        fn = getattr(raw, name)
        assert fn.argtypes == args, name
        assert fn.restype is res, name
        want = 0 if proto.endswith("(void)") else proto.count(",") + 1
        assert len(args) == want, name


def test_err_ptr_helpers():
    for e in (1, 12, 22, 4095):
        p = raw.ERR_PTR(-e)
        assert raw.IS_ERR(p) and raw.PTR_ERR(p) == -e and raw.IS_ERR_OR_NULL(p)
        assert raw.PTR_ERR_OR_ZERO(ctypes.cast(p, ctypes.POINTER(raw.ib_cm_id))) == -e
    assert not raw.IS_ERR(None) and raw.IS_ERR_OR_NULL(None)
    assert not raw.IS_ERR(raw.ERR_PTR(-4096))
    assert not raw.IS_ERR(ctypes.pointer(raw.ib_cm_id()))
    assert raw.PTR_ERR_OR_ZERO(ctypes.pointer(raw.ib_cm_id())) == 0
    assert raw.cpu_to_be16(0x1234) == 0x3412 and raw.be64_to_cpu(raw.cpu_to_be64(5)) == 5
