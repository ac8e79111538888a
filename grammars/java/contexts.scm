; Context classes for Java. Capture names are context classes (see grammars/README.md).

[(line_comment) (block_comment)] @comment
((block_comment) @docstring (#match? @docstring "^/[*][*]"))
[(string_literal) (character_literal)] @string

[(import_declaration) (package_declaration)] @import

(method_invocation arguments: (argument_list) @call_arguments)
(object_creation_expression arguments: (argument_list) @call_arguments)
(explicit_constructor_invocation arguments: (argument_list) @call_arguments)

(formal_parameter type: (_) @type_annotation)
(field_declaration type: (_) @type_annotation)
(method_declaration type: (_) @type_annotation)
[(type_arguments) (type_parameters)] @type_annotation

[(block) (class_body) (interface_body) (enum_body) (constructor_body) (switch_block_statement_group)] @block
