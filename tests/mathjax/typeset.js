// Typeset TeX formulas with MathJax 3 (the renderer the book uses) and report the ones that fail.
// Input on stdin: {"macros": {name: body}, "formulas": [{"page": ..., "tex": ..., "display": bool}]}.
// Output on stdout: a JSON list of {page, tex, error} for every formula MathJax marks as an error.
const {mathjax} = require('mathjax-full/js/mathjax.js');
const {TeX} = require('mathjax-full/js/input/tex.js');
const {SVG} = require('mathjax-full/js/output/svg.js');
const {liteAdaptor} = require('mathjax-full/js/adaptors/liteAdaptor.js');
const {RegisterHTMLHandler} = require('mathjax-full/js/handlers/html.js');
const {AllPackages} = require('mathjax-full/js/input/tex/AllPackages.js');

const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const adaptor = liteAdaptor();
RegisterHTMLHandler(adaptor);
// without 'noundefined' and 'noerrors', an unknown macro or a TeX error is reported instead of drawn in red
const packages = AllPackages.filter((p) => p !== 'noundefined' && p !== 'noerrors');
const tex = new TeX({packages, macros: input.macros,
                     formatError: (jax, err) => { throw err; }});
const doc = mathjax.document('', {InputJax: tex, OutputJax: new SVG({fontCache: 'none'})});

const failures = [];
for (const f of input.formulas) {
  try {
    const node = doc.convert(f.tex, {display: f.display});
    const html = adaptor.outerHTML(node);
    if (html.includes('data-mjx-error') || html.includes('merror')) {
      failures.push({page: f.page, tex: f.tex, error: 'merror in output'});
    }
  } catch (err) {
    failures.push({page: f.page, tex: f.tex, error: String(err.message || err)});
  }
}
process.stdout.write(JSON.stringify(failures));
