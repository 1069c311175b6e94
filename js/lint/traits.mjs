// @ts-check
// ESLint rule `activis/known-traits`: a trait name the JS reads, writes or follows must be a synced
// trait of the Python widget whose model it is. A misspelt name is `undefined` in the browser and no
// test of the view notices, so `npm run lint` refuses it. The names come from the widgets themselves
// (`python -m activis.widgets.trait_names`, with the Python of ACTIVIS_PYTHON, the active virtual
// environment, ./.venv or python3); ACTIVIS_TRAITS names a JSON file of them instead.
//
// Whose model: a view's entry file (js/<bundle>.js) and the files only it imports are its widget's
// (`model`, `kit`); `sel`, `shared` and `api` are the shared Selection; in the saved page's links
// (js/export/explorer.js) each stand-in model is named by its role. js/common/ is every view's kit:
// its names must be some widget's.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const JS = path.join(ROOT, "js");
const SELECTION = "selection";
const SELECTION_NAMES = ["sel", "shared", "api"];
// js/export/explorer.js: the stand-in models of a saved Explorer, by the names the file gives them
const EXPORT_ROLES = { sel: SELECTION, matrix: "activation_matrix", projection: "projection_view",
  instances: "instance_panel", subsetPanel: "subset_panel", graph: "graph_view", why: "misclassification_view" };
// calls whose first argument is one trait name, and calls whose first argument is an object of traits
const NAME_CALLS = new Set(["get", "set", "array", "indices", "clause", "own", "setClause", "clearClause"]);
const OBJECT_CALLS = new Set(["set", "setMany"]);

/** @type {Record<string, string[]> | null} */
let cached = null;

function python() {
  const venv = process.env.VIRTUAL_ENV && path.join(process.env.VIRTUAL_ENV, "bin", "python");
  const local = path.join(ROOT, ".venv", "bin", "python");
  return process.env.ACTIVIS_PYTHON || (venv && existsSync(venv) ? venv : existsSync(local) ? local : "python3");
}

/** Bundle name -> synced trait names, from the Python widgets (once per lint run). */
export function traitNames() {
  if (cached) return cached;
  if (process.env.ACTIVIS_TRAITS) return (cached = JSON.parse(readFileSync(process.env.ACTIVIS_TRAITS, "utf8")));
  const env = { ...process.env, PYTHONPATH: [ROOT, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter) };
  try {
    const out = execFileSync(python(), ["-m", "activis.widgets.trait_names"], { cwd: ROOT, env, encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"] });
    return (cached = JSON.parse(out));
  } catch (err) {
    throw new Error(`activis/known-traits reads the widgets' trait names with ${python()} -m `
      + "activis.widgets.trait_names, which failed: set ACTIVIS_PYTHON to a Python with activis installed "
      + `(make setup) and build the JS first (npm run build).\n${err.stderr || err.message}`, { cause: err });
  }
}

/** Each file under js/ that a view's entry reaches by relative imports -> the bundles reaching it. */
function owners(/** @type {Record<string, string[]>} */ traits) {
  /** @type {Map<string, Set<string>>} */
  const byFile = new Map();
  const visit = (/** @type {string} */ file, /** @type {string} */ bundle) => {
    if (file.startsWith(path.join(JS, "common") + path.sep) || byFile.get(file)?.has(bundle)) return;
    if (!byFile.has(file)) byFile.set(file, new Set());
    byFile.get(file)?.add(bundle);
    for (const m of readFileSync(file, "utf8").matchAll(/(?:from|import)\s+"(\.[^"]+)"/g)) {
      visit(path.resolve(path.dirname(file), m[1]), bundle);
    }
  };
  for (const name of readdirSync(JS)) {
    const bundle = name.replace(/\.js$/, "");
    if (name.endsWith(".js") && traits[bundle]) visit(path.join(JS, name), bundle);
  }
  return byFile;
}

/** @type {import("eslint").Rule.RuleModule} */
const knownTraits = {
  meta: { type: "problem", docs: { description: "trait names the Python widget syncs" }, schema: [] },
  create(context) {
    const traits = traitNames();
    const file = path.resolve(context.filename);
    const every = new Set(Object.values(traits).flat());
    const mine = [...(owners(traits).get(file) || [])];
    /** @type {Record<string, string[]>} receiver name -> the bundles whose model it is */
    const receivers = {};
    if (file === path.join(JS, "export", "explorer.js")) {
      for (const [name, bundle] of Object.entries(EXPORT_ROLES)) receivers[name] = [bundle];
    } else if (mine.length) {
      receivers.model = receivers.kit = receivers.save = mine;
      for (const name of SELECTION_NAMES) receivers[name] = [SELECTION];
    } else {
      receivers.model = [];  // the kit and the page runtime: a name of some widget
    }
    /** @type {Map<string, any[]>} same-file `const X = [..]`, for `arrays: X` */
    const arrays = new Map();

    const check = (/** @type {any} */ node, /** @type {string} */ name, /** @type {string[]} */ bundles) => {
      if (name.startsWith("__")) return;  // the saved page's own bookkeeping on its stand-ins
      const missing = bundles.length ? bundles.find((b) => !traits[b].includes(name)) : every.has(name) ? null
        : "any activis widget";
      if (missing) {
        context.report({ node, message: `"${name}" is not a synced trait of ${traits[missing] ? `the ${missing} `
          + "widget (activis/widgets/)" : missing}: the browser would read undefined` });
      }
    };
    const literal = (/** @type {any} */ node) => (node && node.type === "Literal" && typeof node.value === "string"
      ? node.value : null);
    const objectKeys = (/** @type {any} */ node, /** @type {string[]} */ bundles) => {
      if (!node || node.type !== "ObjectExpression") return;
      for (const prop of node.properties) {
        if (prop.type !== "Property" || prop.computed) continue;
        const key = prop.key.type === "Identifier" ? prop.key.name : literal(prop.key);
        if (key !== null) check(prop.key, key, bundles);
      }
    };

    return {
      VariableDeclarator(node) {
        if (node.id.type === "Identifier" && node.init?.type === "ArrayExpression") arrays.set(node.id.name,
          node.init.elements);
      },
      "Property[key.name='arrays']"(node) {
        if (!mine.length) return;
        const elements = node.value.type === "ArrayExpression" ? node.value.elements
          : node.value.type === "Identifier" ? arrays.get(node.value.name) || [] : [];
        for (const el of elements) if (literal(el) !== null) check(el, literal(el), mine);
      },
      CallExpression(node) {
        const callee = /** @type {any} */ (node.callee), first = node.arguments[0];
        if (callee.type === "Identifier" && callee.name === "save" && receivers.save) {
          objectKeys(first, receivers.save);
          return;
        }
        if (callee.type !== "MemberExpression" || callee.object.type !== "Identifier" || callee.computed) return;
        const bundles = receivers[callee.object.name], method = callee.property.name;
        if (!bundles) return;
        const name = literal(first);
        if (name !== null && NAME_CALLS.has(method)) check(first, name, bundles);
        else if (OBJECT_CALLS.has(method)) objectKeys(first, bundles);
        else if (name !== null && (method === "on" || method === "off")) {
          for (const token of name.split(/\s+/).filter(Boolean)) {
            if (callee.object.name === "kit") check(first, token, bundles);
            else if (token.startsWith("change:")) check(first, token.slice("change:".length), bundles);
          }
        }
      },
    };
  },
};

export default { rules: { "known-traits": knownTraits } };
