// Bundles page.jsx with esbuild (from this folder's lock file) into OUT_DIR,
// with index.html beside it.  Usage: node build.mjs OUT_DIR
import { build } from 'esbuild';
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2];
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(here, 'page.jsx')],
  bundle: true,
  format: 'esm',
  splitting: true,
  outdir: out,
  jsx: 'automatic',
  minify: true,
  define: { 'process.env.NODE_ENV': '"production"' },
  loader: { '.svg': 'file', '.png': 'file', '.woff': 'file', '.woff2': 'file', '.ttf': 'file' },
  logLevel: 'error',
});
copyFileSync(join(here, 'index.html'), join(out, 'index.html'));
