// The JavaScript lint of `make lint`: ESLint's recommended rules and the project's 120 columns.
import js from "@eslint/js";
import globals from "globals";
import traits from "./js/lint/traits.mjs";

const SOURCE_RULE = "a clause's owner is resolved in js/common/selection.js (clausesFor, kit.selection): "
  + "use sel.clause(name) / sel.own(name), never the clause's owner trait";

export default [
  { ignores: ["activis/static/**", "node_modules/**", "**/.venv/**"] },
  js.configs.recommended,
  {
    files: ["js/**/*.js", "js/**/*.mjs", "eslint.config.mjs"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: { ...globals.browser, ...globals.node } },
    rules: {
      "max-len": ["error", { code: 120, ignoreUrls: true }],
      "no-unused-vars": ["error", { args: "after-used", argsIgnorePattern: "^_" }],
      eqeqeq: ["error", "smart"],
      "prefer-const": "error",
      "no-var": "error",
      // Mosaic's rule lives in one place (js/common/selection.js: clausesFor): a view declares its
      // `source` and never compares a clause's `<clause>_source` with its own name
      "no-restricted-syntax": ["error",
        { selector: "Literal[value=/_source$/]", message: SOURCE_RULE },
        { selector: "TemplateElement[value.raw=/_source/]", message: SOURCE_RULE }],
    },
  },
  // a trait name the Python widget does not sync is an error (js/lint/traits.mjs)
  { files: ["js/**/*.js"], plugins: { activis: traits }, rules: { "activis/known-traits": "error" } },
  // the resolver itself, and the Selection's legend (it names the view that made the brush)
  { files: ["js/common/selection.js", "js/selection.js"], rules: { "no-restricted-syntax": "off" } },
];
