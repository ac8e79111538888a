; What a file imports: @module is a module reference; @name a name imported from a relative package
; (`from . import util` imports the module util). Resolved by codecue/context/imports.py.
(import_statement name: (dotted_name) @module)
(import_statement name: (aliased_import name: (dotted_name) @module))
(import_from_statement module_name: (_) @module)
(import_from_statement module_name: (relative_import) name: (dotted_name) @name)
(import_from_statement module_name: (relative_import) name: (aliased_import name: (dotted_name) @name))
