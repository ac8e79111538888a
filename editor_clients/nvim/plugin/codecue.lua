-- :CodeCue status|toggle|enable|disable|stats|restart. Suggestions start with require('codecue').setup().
if vim.g.loaded_codecue then
  return
end
vim.g.loaded_codecue = true

vim.api.nvim_create_user_command('CodeCue', function(args)
  require('codecue').command(args.args)
end, {
  nargs = '?',
  desc = 'CodeCue: status, toggle, enable, disable, stats, restart',
  complete = function(lead)
    return vim.tbl_filter(function(name)
      return name:sub(1, #lead) == lead
    end, require('codecue').subcommands)
  end,
})
