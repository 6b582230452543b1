#[derive(serde::Serialize, serde::Deserialize)]
pub struct Point {
    pub x: i32,
    pub y: i32,
}

#[keel::contract(proto_numbers(Point(x = 1, y = 19000)))]
pub trait Shapes {
    fn echo(&self, p: Point) -> Point;
}

fn main() {}
