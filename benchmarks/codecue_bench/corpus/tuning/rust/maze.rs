//! Breadth-first search through a text maze: `#` walls, `S` start, `E` exit, `.` floor.

use std::collections::VecDeque;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub row: usize,
    pub col: usize,
}

#[derive(Debug)]
pub struct Maze {
    cells: Vec<Vec<u8>>,
    start: Pos,
    exit: Pos,
}

#[derive(Debug, PartialEq, Eq)]
pub enum MazeError {
    Empty,
    Ragged { row: usize },
    Missing(char),
    Duplicate(char),
}

impl fmt::Display for MazeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MazeError::Empty => f.write_str("maze is empty"),
            MazeError::Ragged { row } => write!(f, "row {} has a different width than row 0", row),
            MazeError::Missing(c) => write!(f, "maze has no '{}'", c),
            MazeError::Duplicate(c) => write!(f, "maze has more than one '{}'", c),
        }
    }
}

impl Maze {
    pub fn parse(text: &str) -> Result<Maze, MazeError> {
        let cells: Vec<Vec<u8>> = text.lines().filter(|l| !l.is_empty()).map(|l| l.as_bytes().to_vec()).collect();
        let width = cells.first().ok_or(MazeError::Empty)?.len();
        let (mut start, mut exit) = (None, None);
        for (row, line) in cells.iter().enumerate() {
            if line.len() != width {
                return Err(MazeError::Ragged { row });
            }
            for (col, &cell) in line.iter().enumerate() {
                let slot = match cell {
                    b'S' => &mut start,
                    b'E' => &mut exit,
                    _ => continue,
                };
                if slot.replace(Pos { row, col }).is_some() {
                    return Err(MazeError::Duplicate(cell as char));
                }
            }
        }
        Ok(Maze {
            cells,
            start: start.ok_or(MazeError::Missing('S'))?,
            exit: exit.ok_or(MazeError::Missing('E'))?,
        })
    }

    fn neighbours(&self, pos: Pos) -> impl Iterator<Item = Pos> + '_ {
        const STEPS: [(isize, isize); 4] = [(-1, 0), (1, 0), (0, -1), (0, 1)];
        STEPS.iter().filter_map(move |&(dr, dc)| {
            let row = pos.row.checked_add_signed(dr)?;
            let col = pos.col.checked_add_signed(dc)?;
            let cell = *self.cells.get(row)?.get(col)?;
            (cell != b'#').then_some(Pos { row, col })
        })
    }

    /// The shortest path from S to E, both included, or None if E is walled off.
    pub fn solve(&self) -> Option<Vec<Pos>> {
        let width = self.cells[0].len();
        let index = |p: Pos| p.row * width + p.col;
        let mut came_from: Vec<Option<Pos>> = vec![None; self.cells.len() * width];
        let mut seen = vec![false; came_from.len()];
        let mut queue = VecDeque::from([self.start]);
        seen[index(self.start)] = true;

        while let Some(pos) = queue.pop_front() {
            if pos == self.exit {
                let mut path = vec![pos];
                let mut current = pos;
                while let Some(prev) = came_from[index(current)] {
                    path.push(prev);
                    current = prev;
                }
                path.reverse();
                return Some(path);
            }
            for next in self.neighbours(pos) {
                if !seen[index(next)] {
                    seen[index(next)] = true;
                    came_from[index(next)] = Some(pos);
                    queue.push_back(next);
                }
            }
        }
        None
    }

    /// The maze with the path drawn in `*`.
    pub fn render(&self, path: &[Pos]) -> String {
        let mut cells = self.cells.clone();
        for p in path.iter().filter(|&&p| p != self.start && p != self.exit) {
            cells[p.row][p.col] = b'*';
        }
        cells.iter().map(|row| String::from_utf8_lossy(row).into_owned()).collect::<Vec<_>>().join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_shortest_path() {
        let maze = Maze::parse("S.#\n..#\n#.E\n").unwrap();
        let path = maze.solve().expect("solvable");
        assert_eq!(path.len(), 5);
        assert_eq!(maze.render(&path), "S.#\n**#\n#*E");
    }

    #[test]
    fn reports_bad_mazes() {
        assert_eq!(Maze::parse("S.\n.").unwrap_err(), MazeError::Ragged { row: 1 });
        assert_eq!(Maze::parse("S..\n...").unwrap_err(), MazeError::Missing('E'));
        assert!(Maze::parse("S#\n#E").unwrap().solve().is_none());
    }
}
