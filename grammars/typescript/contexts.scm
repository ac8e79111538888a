; Context classes for TypeScript and TSX. Capture names are context classes (see grammars/README.md).

(comment) @comment
((comment) @docstring (#match? @docstring "^/[*][*]"))
[(string) (template_string) (regex)] @string
(template_substitution) @code

(import_statement) @import

(call_expression arguments: (arguments) @call_arguments)
(new_expression arguments: (arguments) @call_arguments)

[(type_annotation) (type_arguments) (type_parameters)] @type_annotation
(type_alias_declaration value: (_) @type_annotation)
(as_expression (_) . (_) @type_annotation .)

[(statement_block) (class_body) (interface_body) (enum_body) (switch_case) (switch_default)] @block
