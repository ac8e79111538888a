; Context classes for Go. Capture names are context classes (see grammars/README.md).

(comment) @comment
; Go's doc comments are the comments right above a declaration.
((comment) @docstring . [(function_declaration) (method_declaration) (type_declaration) (const_declaration) (var_declaration)])
[(interpreted_string_literal) (raw_string_literal) (rune_literal)] @string

[(import_declaration) (package_clause)] @import

(call_expression arguments: (argument_list) @call_arguments)

(parameter_declaration type: (_) @type_annotation)
(variadic_parameter_declaration type: (_) @type_annotation)
(var_spec type: (_) @type_annotation)
(const_spec type: (_) @type_annotation)
(field_declaration name: (_) type: (_) @type_annotation)  ; not embedded fields: a bare name starts a field
(function_declaration result: (_) @type_annotation)
(method_declaration result: (_) @type_annotation)
(func_literal result: (_) @type_annotation)
(type_spec type: (_) @type_annotation)
(type_arguments) @type_annotation

[(block) (statement_list) (field_declaration_list) (expression_case) (default_case) (type_case) (communication_case)] @block
