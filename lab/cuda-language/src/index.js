// CUDA C sources (.cu, .cuh) open in JupyterLab's text editor with C++ highlighting.  JupyterLab picks
// an editor's language from the file's extension in its language registry, and has no setting that
// maps an extension to a language: a plugin adds the entry.  It borrows the registry's own C++ support
// (CUDA C is C++ with a few keywords of its own), so nothing else is bundled.
//
// Built into ../share/jupyter/labextensions/labkit-cuda-language/, which is committed: users and CI
// build nothing.  To rebuild (Node.js): `npm install` here, then
//   node node_modules/@jupyterlab/builder/lib/build-labextension.js \
//        --core-path "$(python -c 'import jupyterlab, os; print(os.path.dirname(jupyterlab.__file__))')/staging" .
// `make lab` puts lab/share/jupyter on JUPYTER_PATH, where JupyterLab finds it.
import { IEditorLanguageRegistry } from '@jupyterlab/codemirror';

const plugin = {
  id: 'labkit-cuda-language:plugin',
  description: 'Opens CUDA C files (.cu, .cuh) with C++ highlighting',
  autoStart: true,
  requires: [IEditorLanguageRegistry],
  activate: (app, languages) => {
    languages.addLanguage({
      name: 'CUDA',
      displayName: 'CUDA C++',
      mime: 'text/x-cuda',
      extensions: ['cu', 'cuh'],
      load: async () => {
        const cpp = await languages.getLanguage('C++');
        return cpp.support;
      }
    });
  }
};

export default plugin;
