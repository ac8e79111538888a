import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * A small command-line option parser supporting {@code --name value}, {@code --name=value},
 * boolean flags, short aliases and positional arguments, with generated usage text.
 */
public class ArgParser {

    public static class ParseException extends Exception {
        private static final long serialVersionUID = 1L;

        public ParseException(String message) {
            super(message);
        }
    }

    private record Option(String name, Character alias, boolean takesValue, String defaultValue, String help) {}

    private final String program;
    private final Map<String, Option> options = new LinkedHashMap<>();
    private final Map<Character, String> aliases = new LinkedHashMap<>();

    public ArgParser(String program) {
        this.program = program;
        flag("help", 'h', "show this help and exit");
    }

    public ArgParser option(String name, Character alias, String defaultValue, String help) {
        return add(new Option(name, alias, true, defaultValue, help));
    }

    public ArgParser flag(String name, Character alias, String help) {
        return add(new Option(name, alias, false, "false", help));
    }

    private ArgParser add(Option option) {
        if (options.putIfAbsent(option.name(), option) != null) {
            throw new IllegalArgumentException("duplicate option --" + option.name());
        }
        if (option.alias() != null) {
            aliases.put(option.alias(), option.name());
        }
        return this;
    }

    public final class Result {
        private final Map<String, String> values = new LinkedHashMap<>();
        private final List<String> positional = new ArrayList<>();

        public String get(String name) {
            if (!options.containsKey(name)) {
                throw new IllegalArgumentException("no option --" + name);
            }
            return values.getOrDefault(name, options.get(name).defaultValue());
        }

        public boolean isSet(String name) {
            return Boolean.parseBoolean(get(name));
        }

        public <T> T get(String name, Function<String, T> convert) throws ParseException {
            String raw = get(name);
            try {
                return convert.apply(raw);
            } catch (RuntimeException e) {
                throw new ParseException("invalid value for --" + name + ": '" + raw + "'");
            }
        }

        public List<String> positional() {
            return positional;
        }
    }

    public Result parse(String[] args) throws ParseException {
        Result result = new Result();
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            if (arg.equals("--")) {
                result.positional.addAll(List.of(args).subList(i + 1, args.length));
                break;
            }
            String name;
            String inlineValue = null;
            if (arg.startsWith("--")) {
                int eq = arg.indexOf('=');
                name = eq < 0 ? arg.substring(2) : arg.substring(2, eq);
                inlineValue = eq < 0 ? null : arg.substring(eq + 1);
            } else if (arg.length() == 2 && arg.charAt(0) == '-' && aliases.containsKey(arg.charAt(1))) {
                name = aliases.get(arg.charAt(1));
            } else if (arg.startsWith("-") && arg.length() > 1) {
                throw new ParseException("unknown option " + arg);
            } else {
                result.positional.add(arg);
                continue;
            }
            Option option = options.get(name);
            if (option == null) {
                throw new ParseException("unknown option --" + name);
            }
            if (!option.takesValue()) {
                result.values.put(name, inlineValue == null ? "true" : inlineValue);
            } else if (inlineValue != null) {
                result.values.put(name, inlineValue);
            } else if (i + 1 < args.length) {
                result.values.put(name, args[++i]);
            } else {
                throw new ParseException("option --" + name + " needs a value");
            }
        }
        return result;
    }

    public String usage() {
        StringBuilder sb = new StringBuilder("usage: " + program + " [options] [args...]\n\noptions:\n");
        for (Option option : options.values()) {
            String names = (option.alias() != null ? "-" + option.alias() + ", " : "    ") + "--" + option.name();
            if (option.takesValue()) {
                names += " VALUE";
            }
            String dflt = option.takesValue() && option.defaultValue() != null ? " (default: " + option.defaultValue() + ")" : "";
            sb.append(String.format("  %-24s %s%s%n", names, option.help(), dflt));
        }
        return sb.toString();
    }

    public static void main(String[] args) {
        ArgParser parser = new ArgParser("resize")
                .option("width", 'w', "800", "target width in pixels")
                .option("format", 'f', "png", "output format")
                .flag("verbose", 'v', "print each file as it is processed");
        try {
            ArgParser.Result result = parser.parse(args);
            if (result.isSet("help")) {
                System.out.print(parser.usage());
                return;
            }
            int width = result.get("width", Integer::parseInt);
            System.out.printf("width=%d format=%s files=%s%n", width, result.get("format"), result.positional());
        } catch (ParseException e) {
            System.err.println(parser.program + ": " + e.getMessage());
            System.exit(2);
        }
    }
}
