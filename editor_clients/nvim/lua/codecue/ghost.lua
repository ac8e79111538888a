--- Ghost text: the suggestion drawn after the cursor as extmarks (virt_text for the rest of the current
--- line, virt_lines for the lines below). Used for the partialCompletion stream on every Neovim and for
--- final items when the built-in vim.lsp.inline_completion is not used.
local api = vim.api

local M = {}

M.ns = api.nvim_create_namespace('codecue.ghost')

--- Namespace of Neovim's built-in inline completion display (0.12+), or nil before it exists.
---@return integer|nil
function M.native_ns()
  return api.nvim_get_namespaces()['nvim.lsp.inline_completion']
end

local hl_group = 'CodeCueGhost'

---@param group string
function M.set_hl_group(group)
  hl_group = group
end

--- Draw `text` as ghost text at (row, col), replacing any ghost text of ours in the buffer.
---@param bufnr integer
---@param row integer 0-based
---@param col integer 0-based byte column
---@param text string
---@param hint string|nil shown after the text, e.g. " (2/3)"
function M.show(bufnr, row, col, text, hint)
  api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  if text == '' then
    return
  end
  local lines = vim.split(text, '\n', { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { lines[i], hl_group } }
  end
  local first = { { lines[1], hl_group } }
  if hint then
    local last = #virt_lines > 0 and virt_lines[#virt_lines] or first
    last[#last + 1] = { hint, 'CodeCueHint' }
  end
  api.nvim_buf_set_extmark(bufnr, M.ns, row, col, {
    virt_text = first,
    virt_text_pos = 'inline',
    virt_lines = #virt_lines > 0 and virt_lines or nil,
    hl_mode = 'combine',
    -- Text typed at the cursor goes before the ghost text, not after it.
    right_gravity = true,
  })
end

---@param bufnr integer
function M.clear(bufnr)
  if api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

--- Hide what the built-in inline completion draws (its state is left alone).
---@param bufnr integer
function M.clear_native(bufnr)
  local ns = M.native_ns()
  if ns and api.nvim_buf_is_valid(bufnr) then
    api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
  end
end

--- The ghost text drawn in namespace `ns` of the buffer, as the user reads it (hints left out), or nil.
---@param bufnr integer
---@param ns integer
---@return string|nil
local function drawn_text(bufnr, ns)
  local marks = api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })
  if #marks == 0 then
    return nil
  end
  local details = marks[1][4]
  local function chunks_text(chunks)
    local parts = {}
    for _, chunk in ipairs(chunks or {}) do
      if chunk[2] ~= 'CodeCueHint' and chunk[2] ~= 'ComplHintMore' then
        parts[#parts + 1] = chunk[1]
      end
    end
    return table.concat(parts)
  end
  local lines = { chunks_text(details.virt_text) }
  for _, virt_line in ipairs(details.virt_lines or {}) do
    lines[#lines + 1] = chunks_text(virt_line)
  end
  return table.concat(lines, '\n')
end

--- What the user sees as ghost text in the buffer: ours, else the built-in's; nil when nothing.
---@param bufnr integer
---@return string|nil text, string|nil source 'codecue' or 'native'
function M.visible(bufnr)
  local ours = drawn_text(bufnr, M.ns)
  if ours then
    return ours, 'codecue'
  end
  local ns = M.native_ns()
  local native = ns and drawn_text(bufnr, ns)
  if native then
    return native, 'native'
  end
  return nil, nil
end

return M
