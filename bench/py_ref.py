"""Python references for `make bench` (the trees and matrices sections),
run by bench/run.py in a fresh interpreter; prints one JSON line.

    python bench/py_ref.py tree PATH
        treedata.read_h5td(PATH) (read_zarr for a .zarr), which parses the
        trees and builds their networkx DiGraphs, then touches the first
        obst tree; seconds for the call (imports excluded) and the
        process's peak RSS.
    python bench/py_ref.py matrix PATH MANIFEST SECONDS
        anndata's backed read: .h5ad by anndata.read_h5ad(PATH, backed="r"),
        .zarr by anndata.io.sparse_dataset(zarr group "X"); per call:
        one gene's column as a dense vector (X[:, j].toarray()), 100 cells'
        rows (X[s:s+100], CSR), and obsm X_umap (anndata.io.read_elem);
        each repeated over the manifest's genes / row starts until SECONDS
        have passed (at least twice).  Median and minimum seconds per call.
"""

import json
import resource
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore")


def peak_rss_kb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def tree(path):
    import treedata as td

    rss0 = peak_rss_kb()
    t0 = time.perf_counter()
    tdata = td.read_zarr(path) if path.rstrip("/").endswith(".zarr") else td.read_h5td(path)
    key = next(iter(tdata.obst.keys()))
    g = tdata.obst[key]
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "nodes": g.number_of_nodes(), "rss_kb": peak_rss_kb(),
            "rss_before_kb": rss0}


def timed(fn, args, budget):
    times = []
    deadline = time.perf_counter() + budget
    i = 0
    while i < 2 or (time.perf_counter() < deadline and i < len(args) * 4):
        a = args[i % len(args)]
        t0 = time.perf_counter()
        fn(a)
        times.append(time.perf_counter() - t0)
        i += 1
    return {"median_s": statistics.median(times), "min_s": min(times), "calls": len(times)}


def matrix(path, manifest_path, budget):
    import anndata as ad

    with open(manifest_path) as f:
        manifest = json.load(f)
    genes = manifest["gene_names"]
    starts = manifest["row_starts"]
    t0 = time.perf_counter()
    if path.rstrip("/").endswith(".zarr"):
        import zarr

        root = zarr.open_group(path, mode="r")
        x = ad.io.sparse_dataset(root["X"])
        var_names = ad.io.read_elem(root["var"]).index
        umap = root["obsm"]["X_umap"]
        how = "anndata.io.sparse_dataset(zarr.open_group(path)['X'])"
    else:
        import h5py

        backed = ad.read_h5ad(path, backed="r")
        x = backed.X
        var_names = backed.var_names
        umap = h5py.File(path, "r")["obsm/X_umap"]
        how = "anndata.read_h5ad(path, backed='r').X"
    open_s = time.perf_counter() - t0
    col_of = {g: int(var_names.get_loc(g)) for g in genes}
    out = {"open_s": open_s, "how": how}
    out["x_gene"] = timed(lambda g: x[:, col_of[g]].toarray(), genes, budget)
    out["x_rows"] = timed(lambda s: x[s:s + 100], starts, budget)
    out["obsm"] = timed(lambda _: ad.io.read_elem(umap), [0], budget)
    out["rss_kb"] = peak_rss_kb()
    return out


def main():
    kind = sys.argv[1]
    if kind == "tree":
        res = tree(sys.argv[2])
    elif kind == "matrix":
        res = matrix(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    else:
        raise SystemExit(f"unknown reference {kind!r}")
    print("PY_RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()
