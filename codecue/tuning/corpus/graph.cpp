// Shortest paths on a weighted directed graph (Dijkstra).

#include <iostream>
#include <limits>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

namespace graph {

struct Edge {
    int to;
    double weight;
};

class Graph {
public:
    explicit Graph(int nodes) : adjacency_(nodes) {}

    void add_edge(int from, int to, double weight) {
        if (weight < 0) {
            throw std::invalid_argument("negative weight");
        }
        adjacency_.at(from).push_back(Edge{to, weight});
    }

    int size() const { return static_cast<int>(adjacency_.size()); }

    /// Distances from source to every node (infinity when unreachable).
    std::vector<double> shortest_paths(int source) const {
        const double inf = std::numeric_limits<double>::infinity();
        std::vector<double> dist(adjacency_.size(), inf);
        using Item = std::pair<double, int>;
        std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
        dist[source] = 0.0;
        queue.push({0.0, source});
        while (!queue.empty()) {
            auto [d, node] = queue.top();
            queue.pop();
            if (d > dist[node]) {
                continue;
            }
            for (const Edge& edge : adjacency_[node]) {
                double candidate = d + edge.weight;
                if (candidate < dist[edge.to]) {
                    dist[edge.to] = candidate;
                    queue.push({candidate, edge.to});
                }
            }
        }
        return dist;
    }

private:
    std::vector<std::vector<Edge>> adjacency_;
};

}  // namespace graph

int main() {
    graph::Graph g(5);
    g.add_edge(0, 1, 4.0);
    g.add_edge(0, 2, 1.0);
    g.add_edge(2, 1, 2.0);
    g.add_edge(1, 3, 1.0);
    g.add_edge(2, 3, 5.0);
    std::vector<double> dist = g.shortest_paths(0);
    for (int i = 0; i < g.size(); ++i) {
        std::cout << "node " << i << ": " << dist[i] << "\n";
    }
    return 0;
}
