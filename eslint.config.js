import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["node_modules/", "data/", "dist/", ".tmp/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    // The dashboard's page script runs in the browser as is (no build step).
    files: ["src/api/dashboard/public/**/*.js"],
    languageOptions: {
      sourceType: "script",
      globals: { document: "readonly", fetch: "readonly", setTimeout: "readonly", clearTimeout: "readonly", ResizeObserver: "readonly", uPlot: "readonly" },
    },
  },
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
    },
  },
);
