"""The ctypes mirror (hopattn/_ctypes_api.py) has the C header's layout, checked by the compiler.

A small C program, generated from the structs and enums the header declares, prints sizeof and
offsetof of every field and the value of every enumerator; the test compiles it with the system
C compiler and compares with ctypes. It needs no libhopattn.so.
"""

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hopattn import _ctypes_api as api

HEADER = Path(__file__).resolve().parents[2] / "include" / "hopattn" / "hopattn.h"

# C type name -> its mirror. A struct the header gains without a mirror fails the test below.
STRUCTS = {"hopattn_tensor": api.Tensor, "hopattn_forward_options": api.ForwardOptions,
           "hopattn_varlen": api.Varlen, "hopattn_backward_options": api.BackwardOptions,
           "hopattn_quantize_options": api.QuantizeOptions, "hopattn_fp8_scales": api.Fp8Scales}
# C enum name -> (mirror, the prefix the mirror's member names drop).
ENUMS = {"hopattn_status": (api.Status, ("HOPATTN_ERROR_", "HOPATTN_")),
         "hopattn_dtype": (api.DType, ("HOPATTN_DTYPE_",)),
         "hopattn_backend": (api.Backend, ("HOPATTN_BACKEND_",)),
         "hopattn_fp8_scaling": (api.Fp8Scaling, ("HOPATTN_FP8_SCALE_",)),
         "hopattn_fp8_layout": (api.Fp8Layout, ("HOPATTN_FP8_LAYOUT_",))}


def header_text():
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_structs():
    """{typedef name: [field names in order]} of every `typedef struct ... { ... } name;`."""
    structs = {}
    for body, name in re.findall(r"typedef\s+struct\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", header_text(),
                                 flags=re.S):
        fields = []
        for declaration in filter(None, (d.strip() for d in body.split(";"))):
            # "int64_t batch, seqlen" -> batch, seqlen; "const int32_t* p" -> p; "int a[4]" -> a.
            fields += [re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", d).group(1)
                       for d in declaration.split(",")]
        structs[name] = fields
    return structs


def header_enums():
    """{typedef name: [enumerator names in order]} of every `typedef enum ... { ... } name;`."""
    return {name: re.findall(r"(\w+)\s*(?:=[^,]*)?(?:,|$)", body.strip())
            for body, name in re.findall(r"typedef\s+enum\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;",
                                         header_text(), flags=re.S)}


def layout_program(structs, enums):
    """C that prints `struct <name> <sizeof>`, `field <struct> <field> <offset> <size> <kind>`
    (kind f for floating point, i for everything else) and `enum <name> <sizeof>` /
    `value <enumerator> <value>` lines."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "hopattn/hopattn.h"',
             "#define KIND(x) _Generic((x), float: 'f', double: 'f', long double: 'f', \\",
             "                              default: 'i')",
             "int main(void) {"]
    for struct, fields in structs.items():
        lines.append(f'  printf("struct {struct} %zu\\n", sizeof({struct}));')
        for field in fields:
            member = f"(({struct}*)0)->{field}"
            lines.append(f'  printf("field {struct} {field} %zu %zu %c\\n", '
                         f"offsetof({struct}, {field}), sizeof({member}), KIND({member}));")
    for enum, enumerators in enums.items():
        lines.append(f'  printf("enum {enum} %zu\\n", sizeof({enum}));')
        for enumerator in enumerators:
            lines.append(f'  printf("value {enumerator} %lld\\n", (long long){enumerator});')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    """The compiler's view: {"struct": {..}, "field": {(struct, field): (offset, size, kind)},
    "enum": {..}, "value": {..}}."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler: `cc` is not on PATH, so the header's layout cannot be "
                    "measured")
    work = tmp_path_factory.mktemp("abi_layout")
    source, program = work / "layout.c", work / "layout"
    source.write_text(layout_program(header_structs(), header_enums()))
    build = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{HEADER.parents[1]}",
                            str(source), "-o", str(program)], capture_output=True, text=True)
    assert build.returncode == 0, f"{cc} failed on {source}:\n{build.stderr}"
    layout = {"struct": {}, "field": {}, "enum": {}, "value": {}}
    for line in subprocess.run([str(program)], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        kind, *rest = line.split()
        if kind == "field":
            struct, field, offset, size, value_kind = rest
            layout["field"][struct, field] = (int(offset), int(size), value_kind)
        else:
            layout[kind][rest[0]] = int(rest[1])
    return layout


def test_header_is_parsed():
    # Guards the regular expressions: a parser that found nothing would make the tests vacuous.
    structs, enums = header_structs(), header_enums()
    assert structs["hopattn_tensor"][:3] == ["data", "dtype", "batch"]
    assert structs["hopattn_forward_options"][0] == "struct_size"
    assert structs["hopattn_backward_options"][:2] == ["struct_size", "causal"]
    assert enums["hopattn_dtype"] == ["HOPATTN_DTYPE_FLOAT32", "HOPATTN_DTYPE_BFLOAT16",
                                      "HOPATTN_DTYPE_FLOAT16", "HOPATTN_DTYPE_FLOAT8_E4M3"]
    assert structs["hopattn_quantize_options"][:3] == ["struct_size", "scaling", "block_rows"]
    assert structs["hopattn_fp8_scales"] == ["data", "scaling", "block_rows"]
    assert structs["hopattn_forward_options"][-1] == "fp8_v_layout"
    assert structs["hopattn_quantize_options"][-1] == "layout"
    assert enums["hopattn_fp8_layout"] == ["HOPATTN_FP8_LAYOUT_ROWS",
                                           "HOPATTN_FP8_LAYOUT_V_TRANSPOSED"]


def test_every_struct_and_enum_has_a_mirror():
    assert sorted(header_structs()) == sorted(STRUCTS)
    assert sorted(header_enums()) == sorted(ENUMS)


@pytest.mark.parametrize("struct", STRUCTS)
def test_struct_mirror_matches_c(c_layout, struct):
    mirror = STRUCTS[struct]
    assert [name for name, _ in mirror._fields_] == header_structs()[struct], (
        f"{mirror.__name__} must list {struct}'s fields, in the header's order")
    for name, ctype in mirror._fields_:
        offset, size, kind = c_layout["field"][struct, name]
        mirror_kind = "f" if issubclass(ctype, (ctypes.c_float, ctypes.c_double)) else "i"
        assert (getattr(mirror, name).offset, ctypes.sizeof(ctype), mirror_kind) == (
            offset, size, kind), f"{struct}.{name}: (offset, size, kind) in the mirror vs in C"
    assert ctypes.sizeof(mirror) == c_layout["struct"][struct]
    assert ctypes.alignment(mirror) <= c_layout["struct"][struct]


@pytest.mark.parametrize("enum", ENUMS)
def test_enum_mirror_matches_c(c_layout, enum):
    mirror, prefixes = ENUMS[enum]
    # The mirror passes enums as int; the C compiler must agree on their size.
    assert c_layout["enum"][enum] == ctypes.sizeof(ctypes.c_int)
    in_c = {}
    for enumerator in header_enums()[enum]:
        prefix = next(p for p in prefixes if enumerator.startswith(p))
        in_c[enumerator[len(prefix):]] = c_layout["value"][enumerator]
    assert {m.name: int(m) for m in mirror} == in_c


class FakeLibrary:
    """hopattn_init_*: records the struct_size it was given and writes it, as the library does."""

    status = api.Status.OK
    sizes = {}

    @classmethod
    def _init(cls, name, pointer, struct_size):
        cls.sizes[name] = struct_size
        if cls.status == api.Status.OK:
            pointer._obj.struct_size = struct_size
        return cls.status

    @classmethod
    def hopattn_init_forward_options(cls, pointer, struct_size):
        return cls._init("options", pointer, struct_size)

    @classmethod
    def hopattn_init_varlen(cls, pointer, struct_size):
        return cls._init("varlen", pointer, struct_size)

    @classmethod
    def hopattn_init_backward_options(cls, pointer, struct_size):
        return cls._init("backward_options", pointer, struct_size)

    @classmethod
    def hopattn_init_quantize_options(cls, pointer, struct_size):
        return cls._init("quantize_options", pointer, struct_size)

    @staticmethod
    def hopattn_last_error():
        return b"struct_size is 1"


def test_struct_size_helpers_use_the_mirror_size(monkeypatch):
    monkeypatch.setattr(FakeLibrary, "sizes", {})
    assert api.default_forward_options(FakeLibrary).struct_size == ctypes.sizeof(
        api.ForwardOptions)
    assert api.default_varlen(FakeLibrary).struct_size == ctypes.sizeof(api.Varlen)
    assert api.default_backward_options(FakeLibrary).struct_size == ctypes.sizeof(
        api.BackwardOptions)
    assert api.default_quantize_options(FakeLibrary).struct_size == ctypes.sizeof(
        api.QuantizeOptions)
    assert FakeLibrary.sizes == {"options": ctypes.sizeof(api.ForwardOptions),
                                 "varlen": ctypes.sizeof(api.Varlen),
                                 "backward_options": ctypes.sizeof(api.BackwardOptions),
                                 "quantize_options": ctypes.sizeof(api.QuantizeOptions)}


def test_struct_size_helpers_raise_when_the_library_refuses(monkeypatch):
    monkeypatch.setattr(FakeLibrary, "status", api.Status.INVALID_ARGUMENT)
    with pytest.raises(RuntimeError, match="hopattn_init_varlen: INVALID_ARGUMENT: struct_size"):
        api.default_varlen(FakeLibrary)
