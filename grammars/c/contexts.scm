; Context classes for C. Capture names are context classes (see grammars/README.md).

(comment) @comment
((comment) @docstring (#match? @docstring "^(/[*][*]|///)"))
[(string_literal) (char_literal) (system_lib_string)] @string

(preproc_include) @import

(call_expression arguments: (argument_list) @call_arguments)

(parameter_declaration type: (_) @type_annotation)
(field_declaration type: (_) @type_annotation)
(type_descriptor) @type_annotation

[(compound_statement) (field_declaration_list) (case_statement)] @block
