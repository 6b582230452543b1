//! gRPC's route guide (`routeguide.proto`) with a keel contract: one operation of each kind a
//! gRPC service has, so a tonic user can read it beside tonic's `examples/src/routeguide`.
//!
//! | gRPC | keel |
//! |---|---|
//! | `rpc GetFeature(Point) returns (Feature)` | `async fn get_feature(&self, point: Point) -> Feature` |
//! | `rpc ListFeatures(Rectangle) returns (stream Feature)` | `-> MessageStream<Feature>` |
//! | `rpc RecordRoute(stream Point) returns (RouteSummary)` | `points: MessageStream<Point>` |
//! | `rpc RouteChat(stream RouteNote) returns (stream RouteNote)` | both |

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use keel::{MessageStream, Status};
use serde::{Deserialize, Serialize};

/// A point, latitude and longitude in degrees × 10⁷ (as in `routeguide.proto`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    Serialize,
    Deserialize,
    keel::schemars::JsonSchema,
)]
#[schemars(crate = "keel::schemars")]
pub struct Point {
    /// Degrees × 10⁷.
    pub latitude: i32,
    /// Degrees × 10⁷.
    pub longitude: i32,
}

/// A rectangle by two opposite corners.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct Rectangle {
    /// One corner.
    pub lo: Point,
    /// The opposite corner.
    pub hi: Point,
}

/// Something at a point (an empty name: nothing there).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct Feature {
    /// Its name.
    pub name: String,
    /// Where it is.
    pub location: Point,
}

/// A message sent at a point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct RouteNote {
    /// Where.
    pub location: Point,
    /// What.
    pub message: String,
}

/// What `record_route` says about a route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, keel::schemars::JsonSchema)]
#[schemars(crate = "keel::schemars")]
pub struct RouteSummary {
    /// Points received.
    pub point_count: u32,
    /// Known features passed.
    pub feature_count: u32,
    /// Meters covered.
    pub distance: u32,
    /// Seconds between the first point and the end of the stream.
    pub elapsed_time: u32,
}

/// The route guide (`service RouteGuide` in `routeguide.proto`).
#[keel::contract]
pub trait RouteGuide {
    /// The feature at `point` (unary).
    async fn get_feature(&self, point: Point) -> Feature;
    /// The features inside `rect`, streamed as they are found (server streaming).
    async fn list_features(&self, rect: Rectangle) -> MessageStream<Feature>;
    /// A summary of a route streamed point by point (client streaming).
    async fn record_route(&self, points: MessageStream<Point>) -> Result<RouteSummary, Status>;
    /// For each note received, the notes sent earlier at the same point (bidirectional).
    async fn route_chat(&self, notes: MessageStream<RouteNote>) -> MessageStream<RouteNote>;
}

/// The route guide's data: a few features, and the notes received so far.
#[derive(Debug, Clone)]
pub struct Guide {
    features: Arc<Vec<Feature>>,
    notes: Arc<Mutex<HashMap<Point, Vec<RouteNote>>>>,
}

impl Default for Guide {
    fn default() -> Self {
        let at = |name: &str, latitude, longitude| Feature {
            name: name.to_string(),
            location: Point {
                latitude,
                longitude,
            },
        };
        // The first entries of gRPC's route_guide_db.json.
        let features = vec![
            at(
                "Patriots Path, Mendham, NJ 07945, USA",
                407838351,
                -746143763,
            ),
            at(
                "101 New Jersey 10, Whippany, NJ 07981, USA",
                408122808,
                -743999179,
            ),
            at("U.S. 6, Shohola, PA 18458, USA", 413628156, -749015468),
            at(
                "5 Conners Road, Kingston, NY 12401, USA",
                419999544,
                -740371136,
            ),
            at(
                "Mid Hudson Psychiatric Center, New Hampton, NY 10958, USA",
                414008389,
                -743951297,
            ),
            at(
                "287 Flugertown Road, Livingston Manor, NY 12758, USA",
                419611318,
                -746524769,
            ),
            at(
                "4001 Tremley Point Road, Linden, NJ 07036, USA",
                406109563,
                -742186778,
            ),
            at(
                "352 South Mountain Road, Wallkill, NY 12589, USA",
                416802456,
                -742370183,
            ),
        ];
        Guide {
            features: Arc::new(features),
            notes: Arc::default(),
        }
    }
}

impl RouteGuide for Guide {
    async fn get_feature(&self, point: Point) -> Feature {
        self.features
            .iter()
            .find(|f| f.location == point)
            .cloned()
            .unwrap_or(Feature {
                name: String::new(),
                location: point,
            })
    }

    async fn list_features(&self, rect: Rectangle) -> MessageStream<Feature> {
        let inside: Vec<Feature> = self
            .features
            .iter()
            .filter(|f| in_range(f.location, rect))
            .cloned()
            .collect();
        MessageStream::from_iter(inside)
    }

    async fn record_route(&self, mut points: MessageStream<Point>) -> Result<RouteSummary, Status> {
        let start = Instant::now();
        let mut summary = RouteSummary {
            point_count: 0,
            feature_count: 0,
            distance: 0,
            elapsed_time: 0,
        };
        let mut last = None;
        while let Some(point) = points.next().await {
            let point = point?;
            summary.point_count += 1;
            if self.features.iter().any(|f| f.location == point) {
                summary.feature_count += 1;
            }
            if let Some(last) = last {
                summary.distance += calc_distance(last, point);
            }
            last = Some(point);
        }
        summary.elapsed_time = start.elapsed().as_secs() as u32;
        Ok(summary)
    }

    async fn route_chat(&self, mut notes: MessageStream<RouteNote>) -> MessageStream<RouteNote> {
        let (tx, replies) = MessageStream::channel(16);
        let known = self.notes.clone();
        tokio::spawn(async move {
            while let Some(Ok(note)) = notes.next().await {
                let earlier = {
                    let mut known = known.lock().expect("not poisoned");
                    let at = known.entry(note.location).or_default();
                    let earlier = at.clone();
                    at.push(note);
                    earlier
                };
                for n in earlier {
                    if tx.send(n).await.is_err() {
                        return;
                    }
                }
            }
        });
        replies
    }
}

fn in_range(p: Point, r: Rectangle) -> bool {
    let (lo_lat, hi_lat) = (
        r.lo.latitude.min(r.hi.latitude),
        r.lo.latitude.max(r.hi.latitude),
    );
    let (lo_lon, hi_lon) = (
        r.lo.longitude.min(r.hi.longitude),
        r.lo.longitude.max(r.hi.longitude),
    );
    (lo_lat..=hi_lat).contains(&p.latitude) && (lo_lon..=hi_lon).contains(&p.longitude)
}

/// Meters between two points (the haversine formula, as gRPC's examples compute it).
pub fn calc_distance(p1: Point, p2: Point) -> u32 {
    const COORD_FACTOR: f64 = 1e7;
    const R: f64 = 6_371_000.0;
    let lat1 = (f64::from(p1.latitude) / COORD_FACTOR).to_radians();
    let lat2 = (f64::from(p2.latitude) / COORD_FACTOR).to_radians();
    let lng1 = (f64::from(p1.longitude) / COORD_FACTOR).to_radians();
    let lng2 = (f64::from(p2.longitude) / COORD_FACTOR).to_radians();
    let delta_lat = lat2 - lat1;
    let delta_lng = lng2 - lng1;
    let a =
        (delta_lat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (delta_lng / 2.0).sin().powi(2);
    let c = 2.0 * a.sqrt().atan2((1.0 - a).sqrt());
    (R * c) as u32
}

/// The builder of a host serving a [`Guide`] on `url`.
pub fn builder(url: &str) -> keel::host::HostBuilder {
    keel::Host::builder()
        .service(RouteGuideServer::new(Guide::default()))
        .endpoint(url)
}

/// The contract's `.proto` file, as gRPC tools and code generators read it (committed as
/// `examples/proto/routeguide.proto`).
pub fn proto() -> String {
    keel::proto::file(RouteGuideClient::descriptor())
        .expect("every type of the contract has a protobuf type")
}
