"""HDF5 files for the h5grove routes (tests/http/test_h5grove.py), written
with h5py: every dtype h5py writes (ints, floats, bools, strings fixed and
variable, compound, opaque, enum, complex), scalars, empty arrays,
chunked and compressed datasets, soft, hard and external links, broken
links and committed datatypes, with attributes of the same kinds."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

RNG_SEED = 14


def write_types(path: Path) -> None:
    rng = np.random.default_rng(RNG_SEED)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "h5grove fixture"
        f.attrs["version"] = np.int64(3)
        num = f.create_group("numbers")
        for dt in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"):
            info = np.iinfo(dt)
            vals = [info.min, info.min + 1, 0, 1, 2, 3, 5, 7, 11, 100, info.max - 1, info.max]
            num.create_dataset(dt, data=np.array([max(v, info.min) for v in vals],
                                                 dtype=dt).reshape(3, 4))
        num.create_dataset("f2", data=(rng.standard_normal((3, 4)) * 10).astype("f2"))
        num.create_dataset("f4", data=(rng.standard_normal((4, 5)) * 100).astype("f4"))
        num.create_dataset("f8", data=rng.standard_normal((4, 5)) * 1e-3)
        # float32 text over the exponents (orjson's positional and e
        # layouts, subnormals, FLT_MIN, powers of two and ten, ties), and
        # random bit patterns; under 1e15, so numpy's float32 statistics
        # stay finite
        wide = [0.0, -0.0, 5e-45, 1e-40, 1.1754944e-38, 1e-38, 2.0 ** -30, 1e-7, 9.999999e-7,
                1e-6, 1.234e-6, 1.5e-9, 0.1, 1 / 3, 7.0, 123456.79, 16777216.0, 19617.875,
                1048576.5, 2567.06665, 2.0 ** 40, 9.999999e12, 1e13, 2.5e13, 1e14, 3.0e14]
        bits = (rng.integers(60, 175, 256 - len(wide), dtype=np.uint32) << 23
                | rng.integers(0, 1 << 23, 256 - len(wide), dtype=np.uint32)
                | (rng.integers(0, 2, 256 - len(wide), dtype=np.uint32) << 31))
        num.create_dataset("f4_wide", data=np.concatenate(
            [np.array(wide, dtype="f4"), bits.view("f4")]).reshape(16, 16))
        num.create_dataset("f8_big", data=np.array([1e-7, 1e20, 1.5e-5, 123456.789, -0.0, 3.0]))
        num.create_dataset("f4_be", data=np.arange(6, dtype=">f4").reshape(2, 3) / 3)
        num.create_dataset("i4_be", data=np.arange(-3, 3, dtype=">i4"))
        num.create_dataset("nonfinite", data=np.array([1.0, np.nan, -2.5, np.inf, -np.inf, 4.0]))
        num.create_dataset("bool", data=np.array([[True, False, True], [False, False, True]]))
        num.create_dataset("cube", data=np.arange(2 * 3 * 4, dtype="i4").reshape(2, 3, 4))
        num.create_dataset("c16", data=np.array([1 + 2j, -3.5 + 0.25j]))
        num.create_dataset("scalar_f8", data=np.float64(2.5))
        num.create_dataset("scalar_i4", data=np.int32(-7))
        num.create_dataset("scalar_bool", data=np.bool_(True))
        num.create_dataset("empty_null", data=h5py.Empty("f4"))
        num.create_dataset("zero_length", data=np.zeros((0,), dtype="f8"))
        num.create_dataset("zero_rows", data=np.zeros((0, 3), dtype="i2"))
        num.create_dataset("image", data=np.arange(6 * 8, dtype="u2").reshape(6, 8))

        st = f.create_group("strings")
        st.create_dataset("fixed", data=np.array([b"alpha", b"be", b"gamma!"], dtype="S6"))
        st.create_dataset("vlen", data=["one", "two", "three", "d\u00e9j\u00e0"],
                          dtype=h5py.string_dtype())
        st.create_dataset("vlen_ascii", data=[b"x", b"yy"], dtype=h5py.string_dtype("ascii"))
        st.create_dataset("scalar_vlen", data="a single string", dtype=h5py.string_dtype())
        st.create_dataset("scalar_fixed", data=np.bytes_(b"fixed!"))
        st.create_dataset("vlen_2d", data=np.array([["a", "b"], ["c", "d"]], dtype=object),
                          dtype=h5py.string_dtype())

        other = f.create_group("other")
        cdt = np.dtype([("x", "<i4"), ("y", "<f8"), ("label", "S4")])
        other.create_dataset("compound", data=np.array(
            [(1, 0.5, b"a"), (2, -1.25, b"bc"), (3, 1e-7, b"def")], dtype=cdt))
        other.create_dataset("compound_scalar", data=np.array((7, 2.0, b"z"), dtype=cdt))
        other.create_dataset("opaque", data=np.frombuffer(b"abcdefgh12345678", dtype="V8"))
        edt = h5py.enum_dtype({"RED": 0, "GREEN": 1, "BLUE": 42}, basetype="i1")
        other.create_dataset("enum", data=np.array([0, 42, 1, 1], dtype="i1"), dtype=edt)

        comp = f.create_group("storage")
        comp.create_dataset("chunked", data=np.arange(100 * 30, dtype="f4").reshape(100, 30),
                            chunks=(16, 7))
        comp.create_dataset("gzip", data=np.arange(200 * 10, dtype="i8").reshape(200, 10),
                            chunks=(32, 10), compression="gzip", compression_opts=4,
                            shuffle=True)
        comp.create_dataset("lzf", data=np.linspace(0, 1, 500), chunks=(64,), compression="lzf")
        comp.create_dataset("fletcher", data=np.arange(40, dtype="u4"), chunks=(8,),
                            fletcher32=True)
        comp.create_dataset("gzip_strings", data=["s%d" % i for i in range(50)],
                            dtype=h5py.string_dtype(), chunks=(16,), compression="gzip")

        # past numpy's 8192-value buffers and 128-value pairwise blocks
        comp.create_dataset("big_f4", data=(rng.standard_normal((200, 150)) * 50).astype("f4"),
                            chunks=(50, 150), compression="gzip")
        comp.create_dataset("big_f2", data=rng.standard_normal(20000).astype("f2"))
        comp.create_dataset("big_i4", data=rng.integers(-10**6, 10**6, 30000, dtype="i4"))
        ordered = f.create_group("ordered", track_order=True)
        for name in ("zeta", "alpha", "mid"):
            ordered.create_dataset(name, data=np.arange(2))
            ordered.attrs[name] = name

        attrs = f.create_group("attrs")
        a = attrs.attrs
        a["str"] = "text"
        a["str_list"] = ["a", "bb"]
        a["fixed"] = np.bytes_(b"fixed")
        a["int"] = np.int16(-3)
        a["uint"] = np.uint64(2**63 + 5)
        a["float"] = 0.1
        a["float32"] = np.float32(0.1)
        a["floats"] = np.array([1.5, 2.5, 1e-7])
        a["ints_2d"] = np.arange(6, dtype="i4").reshape(2, 3)
        a["bool"] = True
        a["bools"] = np.array([True, False])
        a["empty"] = h5py.Empty("f8")
        a["empty_list"] = np.zeros((0,), dtype="f8")
        a["compound"] = np.array((1, 2.5), dtype=[("a", "<i4"), ("b", "<f8")])
        a["ref"] = f["numbers"].ref
        attrs.create_dataset("with_attrs", data=np.arange(3)).attrs["units"] = "m"

        links = f.create_group("links")
        links["hard"] = f["numbers/f4"]
        links["soft"] = h5py.SoftLink("/numbers/f8")
        links["soft_group"] = h5py.SoftLink("/strings")
        links["broken"] = h5py.SoftLink("/no/such/thing")
        links["external"] = h5py.ExternalLink("other.h5", "/data")
        links["external_broken"] = h5py.ExternalLink("missing.h5", "/data")

        f["committed"] = np.dtype("<f8")
        f["committed_compound"] = cdt
        f["committed"].attrs["doc"] = "a committed type"
        f.create_dataset("uses_committed", data=np.arange(4, dtype="<f8"), dtype=f["committed"])
        f.create_group("empty_group")
        deep = f.create_group("deep/er/est")
        deep.create_dataset("leaf", data=[1, 2, 3])


def write_other(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.arange(5, dtype="i4"))


def write_nexus(path: Path) -> None:
    """A NeXus-like scan (NXentry, NXdata with its signal and axes, units
    and string attributes, a gzip-chunked float32 detector image), as the
    files named .nxs, .nx, .hdf5 and .he5 that h5web users open."""
    rng = np.random.default_rng(RNG_SEED + 1)
    with h5py.File(path, "w") as f:
        f.attrs["NX_class"], f.attrs["default"] = "NXroot", "entry"
        entry = f.create_group("entry")
        entry.attrs["NX_class"], entry.attrs["default"] = "NXentry", "data"
        entry.create_dataset("title", data="a scan", dtype=h5py.string_dtype())
        data = entry.create_group("data")
        data.attrs["NX_class"], data.attrs["signal"] = "NXdata", "counts"
        data.attrs.create("axes", [".", "x"], dtype=h5py.string_dtype())
        counts = data.create_dataset("counts", data=(rng.standard_normal((12, 40)) * 1e3).astype("f4"),
                                     chunks=(4, 40), compression="gzip")
        counts.attrs["units"] = "counts"
        x = data.create_dataset("x", data=np.linspace(0.0, 1.0, 40))
        x.attrs["units"] = "mm"


def write_bench(path: Path, rows: int = 2000, cols: int = 500) -> None:
    """A chunked float32 matrix and a group of small datasets (make bench)."""
    rng = np.random.default_rng(RNG_SEED)
    with h5py.File(path, "w") as f:
        f.create_dataset("matrix", data=rng.standard_normal((rows, cols)).astype("f4"),
                         chunks=(100, cols), compression="gzip", compression_opts=1)
        f.create_dataset("plain", data=rng.standard_normal((rows, cols)).astype("f8"))
        g = f.create_group("group")
        for i in range(20):
            g.create_dataset(f"d{i}", data=np.arange(i + 1))
            g.attrs[f"a{i}"] = i


def write_all(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    write_types(root / "types.h5")
    write_other(root / "other.h5")
    write_nexus(root / "scan.nxs")
    write_nexus(root / "scan.hdf5")
