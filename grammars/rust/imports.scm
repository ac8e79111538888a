; What a file imports: @mod a module declared in another file (`mod name;`), @module a `use` path.
; Resolved by codecue/context/imports.py.
(mod_item name: (identifier) @mod !body)
(use_declaration argument: (_) @module)
