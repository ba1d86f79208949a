// Bundles src/ (the page and the vitessce npm package it imports) with
// esbuild into the folder given, for tests/http/test_vitessce.py.
//   node build.mjs OUTDIR
import { build } from 'esbuild';
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const outdir = process.argv[2];
if (!outdir) throw new Error('usage: node build.mjs OUTDIR');
mkdirSync(outdir, { recursive: true });
await build({
  entryPoints: [join(here, 'src', 'main.jsx')],
  bundle: true,
  format: 'esm',
  splitting: true,
  minify: true,
  outdir,
  logLevel: 'warning',
  define: { 'process.env.NODE_ENV': '"production"', global: 'globalThis' },
  // Vitessce's WebXR views import it lazily; it is an optional peer the
  // scatterplot never loads.
  external: ['@react-three/xr'],
});
copyFileSync(join(here, 'src', 'index.html'), join(outdir, 'index.html'));
