// The JavaScript lint of `make lint`: ESLint's recommended rules and the project's 120 columns.
import js from "@eslint/js";
import globals from "globals";

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
    },
  },
];
