; Context classes for Rust. Capture names are context classes (see grammars/README.md).

[(line_comment) (block_comment)] @comment
(line_comment doc: (_)) @docstring
(block_comment doc: (_)) @docstring
[(string_literal) (raw_string_literal) (char_literal)] @string

[(use_declaration) (extern_crate_declaration)] @import

(call_expression arguments: (arguments) @call_arguments)
(macro_invocation (token_tree) @call_arguments)

(parameter type: (_) @type_annotation)
(let_declaration type: (_) @type_annotation)
(function_item return_type: (_) @type_annotation)
(function_signature_item return_type: (_) @type_annotation)
(field_declaration type: (_) @type_annotation)
(const_item type: (_) @type_annotation)
(static_item type: (_) @type_annotation)
(type_item type: (_) @type_annotation)
[(type_arguments) (type_parameters)] @type_annotation

[(block) (declaration_list) (field_declaration_list) (match_block) (enum_variant_list)] @block
