// After `tsc -b`: the code of the `shardflake/ids` entry in one module, packages/shardflake/dist/ids/bundle.js.
// Each module costs its import ≈ 0.5–0.75 ms of Node's loader, more than the code in it, and the entry loaded 13
// (docs/benchmarks.md, "Import time"). The sources stay one module per job; only what ships changes.
//
// One copy of each class and each piece of state in a process, whichever entry an application imports, or both:
// - errors/ is left out of the bundle (imported from ../errors/*.js), so `shardflake` and `shardflake/ids` throw
//   the same ShardflakeError class;
// - every compiled ids/ module the bundle holds (tsc's dist/ids/<name>.js) is replaced by a one-line module that
//   re-exports that module's names from bundle.js. The main entry, the cluster code, the CLI
//   (`shardflake/internal/ids/…`) and the tests import those, so they reach the bundle's `layouts`, its set of
//   checked layouts, its default LSID generator, SequenceState and LsidState, never a second copy. index.js, the
//   entry, is one of them: it exports exactly what its .d.ts declares.
// esbuild compiles the TypeScript sources, not tsc's output: `tsc -b` does not emit again a file whose source has
// not changed, so after the first build dist/ids holds the re-exports, not the code. tsc still checks the types
// and writes every .d.ts.
import { rmSync, writeFileSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { build } from 'esbuild';

const PACKAGE = join(import.meta.dirname, '..', 'packages', 'shardflake');
const SOURCE = join(PACKAGE, 'src', 'ids');
const OUT = join(PACKAGE, 'dist', 'ids');
const BUNDLE = 'bundle.js';

const common = {
  absWorkingDir: PACKAGE,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  logLevel: 'warning',
};

// The ids modules the entry reaches (inspect.ts, with bson, ulid and uuid, is not one of them: it stays a module
// of its own that imports these), and the names each one exports at run time.
const reached = await build({
  ...common,
  entryPoints: [join(SOURCE, 'index.ts')],
  bundle: true,
  external: ['../errors/*'],
  write: false,
  metafile: true,
  outdir: OUT,
});
const modules = Object.keys(reached.metafile.inputs)
  .filter((input) => input.startsWith('src/ids/'))
  .map((input) => basename(input, '.ts'));
const exported = await build({
  ...common,
  entryPoints: [
    ...modules.map((name) => join(SOURCE, `${name}.ts`)),
    join(PACKAGE, 'src', 'errors', 'errors.ts'),
  ],
  write: false,
  metafile: true,
  outdir: OUT,
});
const namesOf = new Map(
  Object.entries(exported.metafile.outputs)
    .filter(([output]) => output.endsWith('.js'))
    .map(([output, { exports }]) => [basename(output, '.js'), exports]),
);

// One module exporting every name of every one of them. Where two modules export one name, esbuild keeps one of
// them without a word, so no two may, but for index.ts, whose names are the others' and errors.ts's re-exported.
const owner = new Map();
for (const name of [...modules.filter((m) => m !== 'index'), 'errors']) {
  for (const exportName of namesOf.get(name) ?? []) {
    if (owner.has(exportName)) {
      throw new Error(
        `bundle-ids: ${owner.get(exportName)}.ts and ${name}.ts both export ${exportName}; one bundle cannot hold both`,
      );
    }
    owner.set(exportName, name);
  }
}
const bundle = await build({
  ...common,
  stdin: {
    contents: modules.map((name) => `export * from './${name}.ts';`).join('\n'),
    resolveDir: SOURCE,
    sourcefile: 'src/ids/bundle.ts',
  },
  bundle: true,
  external: ['../errors/*'],
  banner: {
    js: '// The code of src/ids/ that `shardflake/ids` loads, in one module (scripts/bundle-ids.mjs says why).',
  },
  sourcemap: true,
  metafile: true,
  outfile: join(OUT, BUNDLE),
});
const bundled = new Set(bundle.metafile.outputs[relative(PACKAGE, join(OUT, BUNDLE))]?.exports);

for (const name of modules) {
  const names = namesOf.get(name) ?? [];
  const missing = names.filter((n) => !bundled.has(n));
  if (missing.length > 0) {
    throw new Error(`bundle-ids: ${BUNDLE} does not export ${missing.join(', ')} of ${name}.ts`);
  }
  writeFileSync(
    join(OUT, `${name}.js`),
    `// The code of src/ids/${name}.ts is in ${BUNDLE} (scripts/bundle-ids.mjs).\nexport { ${names.join(', ')} } from './${BUNDLE}';\n`,
  );
  // tsc's source map described the code that was here.
  rmSync(join(OUT, `${name}.js.map`), { force: true });
}
console.log(`bundle-ids: ${modules.length} modules of src/ids in dist/ids/${BUNDLE}`);
