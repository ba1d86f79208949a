// Reads one array of a zarr store over HTTP with zarrita.js and prints it
// as JSON: {"dtype", "shape", "data"} (data flattened in C order; BigInt
// values and non-finite floats as strings: "-12", "NaN", "-Infinity").
//
//   node read_array.mjs STORE_URL ARRAY_PATH [ROW_START ROW_STOP]
//
// With ROW_START/ROW_STOP only those rows of the first axis are read (a
// partial read: for a sharded array zarrita fetches inner chunks by Range).
import * as zarr from "zarrita";

const [url, path, start, stop] = process.argv.slice(2);
if (!url || !path) {
  console.error("usage: node read_array.mjs STORE_URL ARRAY_PATH [ROW_START ROW_STOP]");
  process.exit(2);
}

const store = new zarr.FetchStore(url);
const arr = await zarr.open(zarr.root(store).resolve(path), { kind: "array" });
let selection = null;
if (start !== undefined) {
  selection = arr.shape.map((_, i) => (i === 0 ? zarr.slice(Number(start), Number(stop)) : null));
}
const chunk = await zarr.get(arr, selection);
const data = Array.from(chunk.data, (v) =>
  typeof v === "bigint" || (typeof v === "number" && !Number.isFinite(v)) ? String(v) : v,
);
process.stdout.write(
  JSON.stringify({
    dtype: arr.dtype,
    shape: chunk.shape,
    data,
  }),
);
