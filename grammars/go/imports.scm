; What a file imports: @module is the import path (with its quotes). Resolved by codecue/context/imports.py;
; a Go file also sees the other files of its package without importing them.
(import_spec path: (_) @module)
