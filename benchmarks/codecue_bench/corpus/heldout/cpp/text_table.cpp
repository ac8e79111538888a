// Render rows of data as an aligned plain-text or Markdown table, with per-column alignment.

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace report {

enum class Align { Left, Right, Center };

struct Column {
    std::string title;
    Align align = Align::Left;
    std::optional<std::size_t> max_width;  // longer cells are truncated with "..."
};

class Table {
public:
    explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {
        if (columns_.empty()) {
            throw std::invalid_argument("a table needs at least one column");
        }
    }

    Table& add_row(std::vector<std::string> cells) {
        if (cells.size() != columns_.size()) {
            std::ostringstream message;
            message << "row has " << cells.size() << " cells, expected " << columns_.size();
            throw std::invalid_argument(message.str());
        }
        rows_.push_back(std::move(cells));
        return *this;
    }

    template <typename T>
    static std::string fixed(T value, int precision = 2) {
        std::ostringstream out;
        out << std::fixed << std::setprecision(precision) << value;
        return out.str();
    }

    std::string render_plain() const { return render(false); }
    std::string render_markdown() const { return render(true); }

private:
    std::string clip(const std::string& text, std::size_t column) const {
        const auto& limit = columns_[column].max_width;
        if (!limit || text.size() <= *limit) {
            return text;
        }
        return *limit <= 3 ? text.substr(0, *limit) : text.substr(0, *limit - 3) + "...";
    }

    std::vector<std::size_t> widths() const {
        std::vector<std::size_t> result;
        for (std::size_t c = 0; c < columns_.size(); ++c) {
            std::size_t width = clip(columns_[c].title, c).size();
            for (const auto& row : rows_) {
                width = std::max(width, clip(row[c], c).size());
            }
            result.push_back(std::max<std::size_t>(width, 3));  // Markdown needs at least "---"
        }
        return result;
    }

    static std::string pad(const std::string& text, std::size_t width, Align align) {
        const std::size_t gap = width - text.size();
        switch (align) {
            case Align::Right:
                return std::string(gap, ' ') + text;
            case Align::Center:
                return std::string(gap / 2, ' ') + text + std::string(gap - gap / 2, ' ');
            case Align::Left:
            default:
                return text + std::string(gap, ' ');
        }
    }

    std::string rule(const std::vector<std::size_t>& widths, bool markdown) const {
        std::string line = markdown ? "|" : "+";
        for (std::size_t c = 0; c < widths.size(); ++c) {
            std::string dashes(widths[c] + 2, '-');
            if (markdown && columns_[c].align != Align::Left) {
                dashes.back() = ':';
                if (columns_[c].align == Align::Center) {
                    dashes.front() = ':';
                }
            }
            line += dashes + (markdown ? "|" : "+");
        }
        return line + "\n";
    }

    std::string line(const std::vector<std::string>& cells, const std::vector<std::size_t>& widths) const {
        std::string out = "|";
        for (std::size_t c = 0; c < cells.size(); ++c) {
            out += " " + pad(clip(cells[c], c), widths[c], columns_[c].align) + " |";
        }
        return out + "\n";
    }

    std::string render(bool markdown) const {
        const auto w = widths();
        std::vector<std::string> titles;
        for (const auto& column : columns_) {
            titles.push_back(column.title);
        }
        std::string out = markdown ? "" : rule(w, false);
        out += line(titles, w) + rule(w, markdown);
        for (const auto& row : rows_) {
            out += line(row, w);
        }
        if (!markdown) {
            out += rule(w, false);
        }
        return out;
    }

    std::vector<Column> columns_;
    std::vector<std::vector<std::string>> rows_;
};

}  // namespace report

int main(int argc, char** argv) {
    using report::Align;
    report::Table table({{"Benchmark", Align::Left, 18}, {"Runs", Align::Right, {}}, {"Mean ms", Align::Right, {}}});
    table.add_row({"parse_small_json", "500", report::Table::fixed(0.8421)})
        .add_row({"parse_large_json_document", "40", report::Table::fixed(61.3)})
        .add_row({"serialize", "500", report::Table::fixed(1.05, 3)});

    const bool markdown = argc > 1 && std::string(argv[1]) == "--markdown";
    std::cout << (markdown ? table.render_markdown() : table.render_plain());
    return 0;
}
