; What a file imports: @module is the module specifier. Resolved by codecue/context/imports.py.
(import_statement source: (string (string_fragment) @module))
(export_statement source: (string (string_fragment) @module))
(call_expression
  function: (identifier) @_require (#eq? @_require "require")
  arguments: (arguments . (string (string_fragment) @module)))
