; What a file includes: @module is a quoted include path (system headers <...> are not the project's).
(preproc_include path: (string_literal) @module)
