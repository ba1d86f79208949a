// cellar's /v1 routes as the viewer reads them: JSON, or binary answers
// (format=bin) as typed arrays, with the bearer token when one is needed.

const TOKEN_KEY = 'cellar-token';
let tokenPrompt = null; // the pending prompt, shared by concurrent 401s

export class ApiError extends Error {
  constructor(status, detail, path) {
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.path = path;
  }
}

export function storeToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function hasToken() {
  return !!sessionStorage.getItem(TOKEN_KEY);
}

// Asks for a token once for every request that got a 401 meanwhile.
function askToken(invalid) {
  if (!tokenPrompt) {
    tokenPrompt = new Promise((resolve) => {
      const dlg = document.getElementById('token-dialog');
      const input = dlg.querySelector('input');
      dlg.querySelector('.why').textContent = invalid
        ? 'That token was not accepted. Try another one.'
        : 'This server needs a bearer token to read its stores.';
      input.value = '';
      const done = (e) => {
        e.preventDefault();
        dlg.querySelector('form').removeEventListener('submit', done);
        dlg.close();
        storeToken(input.value.trim());
        tokenPrompt = null;
        resolve();
      };
      dlg.querySelector('form').addEventListener('submit', done);
      dlg.showModal();
      input.focus();
    });
  }
  return tokenPrompt;
}

// Path segments of a store name ("atlas/liver.zarr") kept as segments.
export function storePath(name) {
  return '/v1/stores/' + name.split('/').map(encodeURIComponent).join('/');
}

function query(params) {
  const parts = [];
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null) continue;
    parts.push(encodeURIComponent(k) + '=' + encodeURIComponent(v).replace(/%2C/g, ','));
  }
  return parts.length ? '?' + parts.join('&') : '';
}

async function send(path, params, signal) {
  for (let attempt = 0; ; attempt++) {
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = 'Bearer ' + token;
    const r = await fetch(path + query(params), { headers, signal });
    if (r.status === 401 && attempt < 5) {
      await askToken(!!token);
      continue;
    }
    if (!r.ok) {
      let detail = '';
      try {
        detail = (await r.json()).detail;
      } catch (e) {
        detail = r.statusText;
      }
      throw new ApiError(r.status, detail, path);
    }
    return r;
  }
}

export async function getJson(path, params, signal) {
  const r = await send(path, params, signal);
  return r.json();
}

const ARRAYS = {
  float32: Float32Array, float64: Float64Array,
  int8: Int8Array, int16: Int16Array, int32: Int32Array,
  uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array,
  bool: Uint8Array, int64: BigInt64Array, uint64: BigUint64Array,
};

// A format=bin answer: {values (a typed array), dtype, shape}.  64-bit
// integers come back as a Float64Array.
export async function getBinary(path, params, signal) {
  const r = await send(path, { ...params, format: 'bin' }, signal);
  const dtype = r.headers.get('X-Dtype');
  const shape = (r.headers.get('X-Shape') || '').split(',').filter((s) => s !== '').map(Number);
  const buf = await r.arrayBuffer();
  const T = ARRAYS[dtype];
  if (!T) throw new ApiError(0, `unsupported dtype ${dtype}`, path);
  let values = new T(buf);
  if (T === BigInt64Array || T === BigUint64Array) values = Float64Array.from(values, Number);
  return { values, dtype, shape };
}
