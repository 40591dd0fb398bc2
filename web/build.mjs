// Builds the page into dist/: index.html (served for `/` and `/instances/{iid}`) and
// dist/assets/app.js + dist/assets/app.css (served under `/assets/`).
import { build } from 'esbuild';
import { cp, mkdir, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? join(root, 'dist');

await rm(out, { recursive: true, force: true });
await mkdir(join(out, 'assets'), { recursive: true });
await build({
  entryPoints: { app: join(root, 'src/main.js') },
  bundle: true,
  format: 'esm',
  target: ['chrome110', 'firefox110', 'safari16'],
  minify: true,
  sourcemap: 'linked',
  outdir: join(out, 'assets'),
  // Code only one view needs (the History view's player) comes in a chunk of its own, loaded
  // when that view first needs it.
  splitting: true,
  chunkNames: 'chunks/[name]-[hash]',
  // The CSS imported by the modules (xterm's own and the page's) lands in app.css.
  loader: { '.css': 'css' },
  logLevel: 'warning',
});
await cp(join(root, 'index.html'), join(out, 'index.html'));
console.log(`built ${out}`);
