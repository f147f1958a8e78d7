"""upstream_src.py - one function of upstream's source, without its module.

Dev tool (not part of the product). The installed `chatterbox-tts` package
(pip install chatterbox-tts --no-deps) holds functions such as punc_norm in
modules (tts.py, mtl_tts.py) whose imports pull in torch and the whole model
stack. This reads the module's source, takes the one top-level function by
name with the `ast` module and executes it alone, so the dev tools run
upstream's own code, not a re-typed copy.
"""
import ast
import importlib.util
import os


def function(module, name):
    """The function `name` defined at the top level of chatterbox/<module>."""
    spec = importlib.util.find_spec("chatterbox")
    if spec is None:
        raise SystemExit("upstream_src: the chatterbox-tts package is not installed "
                         "(pip install chatterbox-tts --no-deps)")
    path = os.path.join(spec.submodule_search_locations[0], module)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            scope = {}
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), scope)
            return scope[name]
    raise SystemExit(f"upstream_src: no function {name} in {path}")
