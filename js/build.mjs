// Bundles every view in js/ (one entry file per widget) into activis/static/<view>.js.
// Each widget loads only its own bundle; shared code lives in js/common/ and is inlined.
import * as esbuild from "esbuild";
import { readdirSync } from "node:fs";

const entries = readdirSync("js")
  .filter((f) => f.endsWith(".js"))
  .map((f) => `js/${f}`);
const options = {
  entryPoints: entries,
  bundle: true,
  format: "esm",
  minify: !process.env.ACTIVIS_NO_MINIFY,
  target: "es2020",
  outdir: "activis/static",
  logLevel: "info",
};
if (process.argv.includes("--watch")) {
  const ctx = await esbuild.context({ ...options, sourcemap: "inline" });
  await ctx.watch();
} else {
  await esbuild.build(options);
}
