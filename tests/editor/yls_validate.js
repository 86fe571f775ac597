// Validate spec files against archspec's JSON Schema with yaml-language-server's own validator,
// the one VS Code's YAML extension (redhat.vscode-yaml) runs: what an editor would underline.
//
//   archspec schema > /tmp/archspec.schema.json
//   npm install yaml-language-server vscode-languageserver-textdocument   (anywhere; then NODE_PATH=...)
//   NODE_PATH=.../node_modules node tests/editor/yls_validate.js /tmp/archspec.schema.json specs/*.yaml
//
// Prints each file's problems (line:column message); tests/language/test_schema.py runs it when
// yaml-language-server can be found.
const fs = require("fs");
const path = require("path");
const { TextDocument } = require("vscode-languageserver-textdocument");

function languageService() {
  for (const where of ["out/server/src", "out/src"]) { // 1.x, 2.x
    try {
      return require(`yaml-language-server/${where}/languageservice/yamlLanguageService`).getLanguageService;
    } catch (e) { /* the other layout */ }
  }
  throw new Error("yaml-language-server not found (set NODE_PATH to the node_modules that has it)");
}

const [schemaFile, ...files] = process.argv.slice(2);
const service = languageService()({
  schemaRequestService: async (uri) => fs.readFileSync(new URL(uri), "utf8"),
  workspaceContext: { resolveRelativePath: (relative) => relative },
});
const schemaUri = "file://" + path.resolve(schemaFile);
service.configure({ validate: true, schemas: [{ uri: schemaUri, fileMatch: ["*.yaml", "*.yml"] }], customTags: [] });

(async () => {
  for (const file of files) {
    const text = fs.readFileSync(file, "utf8");
    const doc = TextDocument.create("file://" + path.resolve(file), "yaml", 1, text);
    const found = await service.doValidation(doc, false);
    console.log(`${file}: ${found.length} problem(s)`);
    for (const d of found) {
      console.log(`  ${d.range.start.line + 1}:${d.range.start.character + 1} ${d.message}`);
    }
  }
})();
