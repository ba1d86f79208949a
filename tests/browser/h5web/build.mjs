// Bundles src/ (the page and the @h5web/app npm package it imports) with
// esbuild into the folder given, for tests/http/test_h5web.py.
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
  minify: true,
  outdir,
  jsx: 'automatic',
  logLevel: 'warning',
  loader: { '.woff': 'file', '.woff2': 'file', '.svg': 'file', '.png': 'file' },
  define: { 'process.env.NODE_ENV': '"production"', global: 'globalThis' },
});
copyFileSync(join(here, 'src', 'index.html'), join(outdir, 'index.html'));
