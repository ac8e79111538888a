; Context classes for JavaScript. Capture names are context classes (see grammars/README.md).

(comment) @comment
((comment) @docstring (#match? @docstring "^/[*][*]"))
[(string) (template_string) (regex)] @string
(template_substitution) @code

(import_statement) @import

(call_expression arguments: (arguments) @call_arguments)
(new_expression arguments: (arguments) @call_arguments)

[(statement_block) (class_body) (switch_case) (switch_default)] @block
